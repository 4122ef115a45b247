"""Metric identities: small parseable value objects with one canonical spelling.

``parse_measure("ndcg@10")`` and ``str(metric) == "ndcg@10"`` round-trip, so names in files, tables, CLI flags
and store rows are the same thing (the ir_measures idea, with ragassay's own spelling). The spellings of
trec_eval (``ndcg_cut.10``, ``P_5``, ``recip_rank``, ``set_F.0.5``), ir_measures (``nDCG@10``,
``P(rel=2)@5``, ``RBP(p=0.8,rel=1)``, ``nDCG(dcg='exp-log2')@10``, ``SetRelP``) and ranx (``mrr@10``,
``hit_rate@10``, ``r-precision``, ``f1@10``, ``ndcg_burges@10``, ``precision@5-l2``, ``rbp.8``) parse to the
canonical identity with that tool's meaning; docs/metrics.md has the table.

Two rules make a tool's name mean what the tool means:

- a parameter written in the name is pinned into the identity (``P(rel=2)@5`` is ``precision(rel=2)@5``,
  ``ndcg_burges@10`` is ``ndcg(gain=exp)@10``) and overrides the run's :class:`~ragassay.metrics.semantics.
  Semantics` for that measure only;
- a name without parameters is read under the run's semantics (``P@5`` is ``precision@5``: grade >= the run's
  relevance level). ``ragassay trec`` defaults to trec_eval's (rel >= 1, linear gain), which is also what
  ir_measures and ranx assume, so there every tool's plain name gives that tool's value.

Names a tool defines differently from anything ragassay computes, or that two tools read differently (bare
``recall``: trec_eval's nine cutoffs, ranx's whole ranking; ``rbp@10``: ir_measures' cutoff, ranx's
persistence), are refused with the accepted spellings instead of being mapped to something close.

:meth:`Metric.parse` returns only the identities :func:`ragassay.metrics.retrieval.evaluate` computes under
the run's semantics alone; :func:`parse_measure` returns every one, and
:func:`ragassay.metrics.measures.evaluate` computes them all.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, replace

from ragassay.errors import InputError

# family -> (cutoff rule, the parameters it takes). Cutoff rule: "required", "optional" or "none".
_FAMILIES: dict[str, tuple[str, frozenset[str]]] = {
    "recall": ("required", frozenset({"rel", "judged_only"})),
    "precision": ("required", frozenset({"rel", "judged_only"})),
    "success": ("required", frozenset({"rel", "judged_only"})),
    "judged": ("required", frozenset()),
    "rr": ("optional", frozenset({"rel", "judged_only"})),
    "ap": ("optional", frozenset({"rel", "judged_only"})),
    "ndcg": ("optional", frozenset({"gain", "gains", "judged_only"})),
    "dcg": ("optional", frozenset({"gain"})),
    "rprec": ("none", frozenset({"rel", "judged_only"})),
    "bpref": ("none", frozenset({"rel"})),
    "err": ("optional", frozenset()),
    "rbp": ("optional", frozenset({"p", "rel"})),
    "num_ret": ("none", frozenset()),
    "num_rel": ("none", frozenset({"rel"})),
    "num_rel_ret": ("none", frozenset({"rel"})),
    "hits": ("optional", frozenset({"rel"})),
    "set_precision": ("none", frozenset({"rel", "judged_only"})),
    "set_relative_precision": ("none", frozenset({"rel", "judged_only"})),
    "set_recall": ("none", frozenset({"rel"})),
    "set_f": ("none", frozenset({"rel", "beta", "judged_only"})),
    "f1": ("required", frozenset({"rel"})),
    "iprec": ("none", frozenset({"r", "rel", "judged_only"})),
    "11pt_avg": ("none", frozenset()),
    "infap": ("none", frozenset({"rel"})),
    "gm_map": ("none", frozenset()),
}
# families ragassay.metrics.retrieval.evaluate computes (without parameters); the rest need metrics.measures
_PLAIN = frozenset(_FAMILIES) - {"rbp", "hits", "set_relative_precision", "f1"}
_SUMMED = frozenset({"num_ret", "num_rel", "num_rel_ret"})  # trec_eval's `all` line sums these

# Every accepted spelling of a name (lower-cased; parameters and cutoffs come separately) -> (family,
# parameters the name itself implies). ragassay's canonical names are included.
_NAMES: dict[str, tuple[str, dict]] = {
    **{f: (f, {}) for f in _FAMILIES},
    # ir_measures
    "r": ("recall", {}), "p": ("precision", {}), "map": ("ap", {}), "mrr": ("rr", {}), "numret": ("num_ret", {}),
    "numrelret": ("num_rel_ret", {}), "numrel": ("num_rel", {}), "setp": ("set_precision", {}),
    "setrelp": ("set_relative_precision", {}), "setr": ("set_recall", {}), "setf": ("set_f", {}),
    # trec_eval (lower-cased: set_P, set_F, set_relative_P)
    "recip_rank": ("rr", {}), "set_p": ("set_precision", {}), "set_relative_p": ("set_relative_precision", {}),
    # ranx
    "hit_rate": ("success", {}), "r-precision": ("rprec", {}), "dcg_burges": ("dcg", {"gain": "exp"}),
    "ndcg_burges": ("ndcg", {"gain": "exp"}),
    # spellings accepted before
    "r-prec": ("rprec", {}), "r_prec": ("rprec", {}),
}
# ranx's names without a cutoff mean the whole ranking
_WHOLE_RANKING = {"precision": "set_precision", "recall": "set_recall", "f1": "set_f"}
# ranx's metric names: the only ones its "-lN" relevance-level suffix may follow
_RANX = frozenset({"hits", "hit_rate", "precision", "recall", "f1", "r-precision", "mrr", "map", "ndcg", "dcg",
                   "ndcg_burges", "dcg_burges", "bpref"})
# trec_eval measures taking a list of cutoffs (P.5,10): name -> family, and trec_eval's default list
_TREC_CUTS: dict[str, tuple[str, str]] = {
    "p": ("precision", "5,10,15,20,30,100,200,500,1000"), "recall": ("recall", "5,10,15,20,30,100,200,500,1000"),
    "ndcg_cut": ("ndcg", "5,10,15,20,30,100,200,500,1000"), "map_cut": ("ap", "5,10,15,20,30,100,200,500,1000"),
    "success": ("success", "1,5,10"),
}
_TREC_IPREC_DEFAULT = "0.00,0.10,0.20,0.30,0.40,0.50,0.60,0.70,0.80,0.90,1.00"
# Measures of those tools that ragassay does not compute (lower-cased): named in the error instead of "unknown".
_NOT_COMPUTED = {
    "trec_eval": frozenset({"num_q", "relative_p", "gm_bpref", "rprec_mult", "utility", "g", "bing", "rndcg",
                            "ndcg_rel", "set_map", "num_nonrel_judged_ret", "relstring", "runid", "p_avgjg",
                            "map_avgjg", "rprec_mult_avgjg", "yaap"}),
    "ir_measures": frozenset({"accuracy", "bpm", "compat", "err_ia", "nerr_ia", "alpha_dcg", "α_dcg", "alpha_ndcg",
                              "α_ndcg", "nrbp", "nnrbp", "ap_ia", "map_ia", "p_ia", "strecall", "inst", "insq",
                              "nerr8", "nerr9", "nerr10", "nerr11", "numq", "sdcg", "setap"}),
}

# The recall levels of trec_eval's iprec_at_recall and 11pt_avg: 0.0, 0.1, ..., 1.0.
IPREC_LEVELS = tuple(i / 10 for i in range(11))

RBP_DEFAULT_P = 0.8  # ir_measures' default persistence

ACCEPTED = (
    "ragassay: recall@K precision@K success@K rr ap ndcg dcg (each @K too) rprec bpref judged@K err rbp(p=0.8) "
    "num_ret num_rel num_rel_ret hits@K set_precision set_relative_precision set_recall set_f f1@K iprec(r=0.5) "
    "11pt_avg infap gm_map, parameters (rel=2) (gain=exp) (judged_only=true); trec_eval: P.5 recall.100 "
    "ndcg_cut.10 map_cut.10 success.1 recip_rank map gm_map Rprec bpref ndcg num_ret num_rel num_rel_ret set_P "
    "set_relative_P set_recall set_F set_F.0.5 iprec_at_recall.0.5 11pt_avg infAP; ir_measures: P@5 R@10 "
    "Success@1 RR AP nDCG Rprec Bpref Judged@10 ERR@10 RBP NumRet NumRelRet NumRel SetP SetRelP SetR SetF "
    "IPrec@0.5 infAP with their rel, judged_only, dcg, gains, p, beta, relative parameters; ranx: hits@K "
    "hit_rate@K precision precision@K recall@K f1 f1@K r-precision mrr mrr@K map map@K ndcg ndcg@K dcg@K "
    "ndcg_burges@K dcg_burges@K bpref rbp.8 and -lN"
)


class NotAMetricName(InputError):
    """The text names no ranking measure of ragassay or of trec_eval, ir_measures or ranx (e.g. ``answer_f1``)."""


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Metric:
    """A ranking metric identity: ``name`` (the family), an optional cutoff ``k``, for RBP the persistence ``p``,
    for interpolated precision the recall level ``r``, and the parameters a tool's name can pin: ``rel`` (a
    grade >= rel is relevant), ``gain`` (``linear`` or ``exp``), ``judged_only`` (unjudged documents removed
    from the ranking first, trec_eval's -J), ``gains`` (nDCG's grade -> gain map, as sorted pairs) and ``beta``
    (set F's weight). None means "the run's semantics" (or the family's default)."""

    name: str
    k: int | None = None
    p: float | None = None
    r: float | None = None
    rel: int | None = None
    gain: str | None = None
    judged_only: bool = False
    gains: tuple[tuple[int, int], ...] | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        fam = _FAMILIES.get(self.name)
        if fam is None:
            raise InputError(f"unknown metric {self.name!r}; known: {', '.join(sorted(_FAMILIES))} "
                             f"(e.g. ndcg@10, recall@100)")
        rule, allowed = fam
        if rule == "required" and self.k is None:
            raise InputError(f"metric {self.name!r} needs a cutoff: write {self.name}@K, e.g. {self.name}@10")
        if rule == "none" and self.k is not None:
            raise InputError(f"metric {self.name!r} takes no cutoff: write {self.name}")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise InputError(f"metric {self.name}@{self.k}: the cutoff must be a positive integer")
        given = {key for key in ("p", "r", "rel", "gain", "gains", "beta") if getattr(self, key) is not None}
        given |= {"judged_only"} if self.judged_only else set()
        if self.name == "rbp" and self.p is None:
            object.__setattr__(self, "p", RBP_DEFAULT_P)
            given.add("p")
        extra = given - allowed
        if extra:
            takes = ", ".join(sorted(allowed)) or "no parameters"
            raise InputError(f"metric {self.name!r} takes {takes}, not {', '.join(sorted(extra))}")
        self._check_values()

    def _check_values(self) -> None:
        if self.p is not None and not 0.0 < self.p < 1.0:
            raise InputError(f"rbp(p={self.p:g}): the persistence p must lie strictly between 0 and 1")
        if self.name == "iprec" and (self.r is None or not 0.0 <= self.r <= 1.0):
            raise InputError("iprec needs a recall level r in [0, 1], as in iprec(r=0.5) or IPrec@0.5")
        if self.rel is not None and (isinstance(self.rel, bool) or not isinstance(self.rel, int) or self.rel < 1):
            raise InputError(f"metric {self.name}: rel={self.rel!r}: the relevance level is an integer >= 1 "
                             f"(grade 0 is non-relevant)")
        if self.gain is not None and self.gain not in ("linear", "exp"):
            raise InputError(f"metric {self.name}: gain={self.gain!r}: use linear (g) or exp (2^g - 1)")
        if self.gains is not None:
            if self.gain is not None:
                raise InputError(f"metric {self.name}: gains maps grades to gains directly; drop gain=")
            if not self.gains:
                raise InputError(f"metric {self.name}: gains is empty; drop it or map grades, e.g. {{2:3}}")
        if self.beta is not None and not (math.isfinite(self.beta) and self.beta > 0):
            raise InputError(f"set_f(beta={self.beta:g}): beta must be a positive number")

    @property
    def plain(self) -> bool:
        """True when :func:`ragassay.metrics.retrieval.evaluate` computes it under the run's semantics alone."""
        return (self.name in _PLAIN and self.rel is None and self.gain is None and not self.judged_only
                and self.gains is None and self.beta is None)

    @property
    def geometric(self) -> bool:
        """True for a measure whose mean over queries is geometric (gm_map)."""
        return self.name == "gm_map"

    @property
    def aggregate(self) -> str:
        """How queries combine into the summary, as trec_eval's ``all`` line and ir_measures do: ``sum`` for
        the counts num_ret, num_rel and num_rel_ret, ``geometric`` for gm_map, ``mean`` otherwise."""
        if self.name in _SUMMED:
            return "sum"
        return "geometric" if self.geometric else "mean"

    @classmethod
    def parse(cls, text: str | Metric) -> Metric:
        """A metric :func:`ragassay.metrics.retrieval.evaluate` computes under the run's semantics alone, from
        any accepted spelling (``nDCG@10``, ``ndcg_cut.10``, ``P_5``, ``map``). A name that pins a parameter
        (``P(rel=2)@5``) or needs :mod:`ragassay.metrics.measures` (``RBP(p=0.8)``, ``hits@10``, ``f1@10``)
        raises InputError saying so; :func:`parse_measure` accepts those."""
        m = text if isinstance(text, Metric) else parse_measure(text)
        if not m.plain:
            raise InputError(f"metric {m} is not computed by metrics.retrieval.evaluate, which reads every "
                             f"measure under the run's semantics; score it with ragassay.metrics.measures."
                             f"evaluate (as ragassay trec does)")
        return m

    def ir_measures_name(self) -> str:
        """The ir_measures spelling: ``nDCG@10``, ``P(rel=2)@5``, ``RBP(p=0.8,rel=1)``, ``IPrec@0.5``."""
        name = _IR_MEASURES.get(self.name)
        if name is None:
            raise InputError(f"metric {self} has no ir_measures equivalent")
        params = []
        if self.name == "num_rel_ret":
            name = "NumRelRet" if self.rel is None else "NumRet"
        if self.name == "set_relative_precision":
            params.append("relative=True")
        if self.p is not None:
            params.append(f"p={_fmt(self.p)}")
        if self.rel is not None:
            params.append(f"rel={self.rel}")
        if self.gain is not None:
            params.append("dcg='log2'" if self.gain == "linear" else "dcg='exp-log2'")
        if self.gains is not None:
            params.append("gains={" + ",".join(f"{a}:{b}" for a, b in self.gains) + "}")
        if self.beta is not None:
            params.append(f"beta={_fmt(self.beta)}")
        if self.judged_only:
            params.append("judged_only=True")
        base = name + (f"({','.join(params)})" if params else "")
        if self.name == "iprec":
            return f"{base}@{_fmt(self.r)}"
        return base if self.k is None else f"{base}@{self.k}"

    def _text(self, cutoff: str | None) -> str:
        params = []
        if self.p is not None:
            params.append(f"p={_fmt(self.p)}")
        if self.r is not None:
            params.append(f"r={_fmt(self.r)}")
        if self.rel is not None:
            params.append(f"rel={self.rel}")
        if self.gain is not None:
            params.append(f"gain={self.gain}")
        if self.gains is not None:
            params.append("gains={" + ",".join(f"{a}:{b}" for a, b in self.gains) + "}")
        if self.beta is not None:
            params.append(f"beta={_fmt(self.beta)}")
        if self.judged_only:
            params.append("judged_only=true")
        base = self.name + (f"({','.join(params)})" if params else "")
        return base if cutoff is None else f"{base}@{cutoff}"

    def __str__(self) -> str:
        return self._text(None if self.k is None else str(self.k))

    def __lt__(self, other: Metric) -> bool:
        return (self.name, str(self)) < (other.name, str(other))


# The ir_measures measure of each family (num_rel_ret and set_relative_precision get their parameters above).
_IR_MEASURES: dict[str, str] = {
    "recall": "R", "precision": "P", "success": "Success", "judged": "Judged", "rr": "RR", "ap": "AP",
    "ndcg": "nDCG", "rprec": "Rprec", "bpref": "Bpref", "err": "ERR", "rbp": "RBP", "num_ret": "NumRet",
    "num_rel": "NumRel", "num_rel_ret": "NumRet", "set_precision": "SetP", "set_relative_precision": "SetP",
    "set_recall": "SetR", "set_f": "SetF", "iprec": "IPrec", "infap": "infAP",
}

_GENERAL = re.compile(r"^(?P<name>11pt_avg|[^\W\d][\w\-]*?)(?:\((?P<params>.*)\))?(?:@(?P<at>[^@()]*))?$")
_RANX_LEVEL = re.compile(r"^(?P<base>.+?)-l(?P<level>\d+)$")
_RANX_RBP = re.compile(r"^rbp\.(?P<digits>\d+)$", re.IGNORECASE)
_TREC_DOTTED = re.compile(r"^(?![Rr][Bb][Pp]\.)(?P<name>[A-Za-z_]+)\.(?P<params>.+)$")  # rbp.8 is ranx's
_TREC_UNDERSCORE = re.compile(r"^(?P<name>P|recall|ndcg_cut|map_cut|success)_(?P<k>\d+)$", re.IGNORECASE)
_TREC_IPREC = re.compile(r"^iprec_at_recall_(?P<r>[0-9.]+)$", re.IGNORECASE)
_SYMBOLIC = re.compile(r"^[A-Za-z_]\w*$")
_SYMBOL_K = 1  # the cutoff stand-in while a symbolic depth (ndcg@final_k) is validated


def parse_measures(text: str | Metric) -> list[Metric]:
    """Every metric a name stands for: one, or several for trec_eval's cutoff lists (``P.5,10`` is
    precision@5 and precision@10, ``iprec_at_recall.0.2,0.8`` two levels). Errors as :func:`parse_measure`."""
    if isinstance(text, Metric):
        return [text]
    s = text.strip()
    m = _TREC_DOTTED.match(s)
    if m is not None:
        return _trec_dotted(text, m.group("name"), m.group("params"))
    return [_parse(text, s, symbolic=False)[0]]


def parse_measure(text: str | Metric) -> Metric:
    """The identity of one measure name in any accepted spelling (module docstring); InputError for a name
    ragassay does not compute, names ambiguously, or that stands for several measures (``P.5,10``)."""
    found = parse_measures(text)
    if len(found) != 1:
        raise InputError(f"metric {text!r} names {len(found)} measures ({', '.join(map(str, found))}); give one")
    return found[0]


def canonical_name(text: str) -> str:
    """The stored spelling of any metric name: ranking metrics in any accepted spelling become canonical
    (``nDCG@5`` -> ``ndcg@5``, ``P(rel=2)@final_k`` -> ``precision(rel=2)@final_k``); names of no ranking
    measure (``answer_f1``) are returned as given, since they have only one spelling. A tool's measure that
    ragassay does not compute, an ambiguous name, or one standing for several measures raises InputError."""
    s = text.strip()
    try:
        if _TREC_DOTTED.match(s):
            return str(parse_measure(s))
        metric, depth = _parse(text, s, symbolic=True)
    except NotAMetricName:
        return s
    return metric._text(depth) if depth is not None else str(metric)


def _trec_dotted(text: str, name: str, params: str) -> list[Metric]:
    low = name.lower()
    values = [v.strip() for v in params.split(",")]
    if low in _TREC_CUTS:
        if not all(v.isdigit() for v in values):
            raise InputError(f"metric {text!r}: trec_eval's {name} takes cutoffs, as in {name}.5,10")
        return [Metric(_TREC_CUTS[low][0], int(v)) for v in values]
    if low == "iprec_at_recall":
        try:
            return [Metric("iprec", r=float(v)) for v in values]
        except ValueError:
            raise InputError(f"metric {text!r}: recall levels are numbers, as in iprec_at_recall.0.5") from None
    if low == "set_f":
        if len(values) != 1:
            raise InputError(f"metric {text!r}: set_F takes one beta, as in set_F.0.5")
        return [_with_beta(text, values[0])]
    if low in _NAMES or any(low in names for names in _NOT_COMPUTED.values()):
        raise InputError(f"metric {text!r}: the NAME.PARAMS form is trec_eval's, for P, recall, ndcg_cut, "
                         f"map_cut, success, iprec_at_recall and set_F; accepted: {ACCEPTED}")
    raise NotAMetricName(f"unknown metric {text!r}; accepted: {ACCEPTED}")


def _with_beta(text: str, value: str) -> Metric:
    try:
        beta = float(value)
    except ValueError:
        raise InputError(f"metric {text!r}: beta must be a number, as in set_F.0.5") from None
    return Metric("set_f", beta=None if beta == 1.0 else beta)


def _parse(text: str, s: str, symbolic: bool) -> tuple[Metric, str | None]:
    """(metric, symbolic depth or None). ``symbolic`` admits a named depth (``ndcg@final_k``)."""
    m = _TREC_UNDERSCORE.match(s)
    if m is not None:
        return Metric(_TREC_CUTS[m.group("name").lower()][0], int(m.group("k"))), None
    m = _TREC_IPREC.match(s)
    if m is not None:
        try:
            return Metric("iprec", r=float(m.group("r"))), None
        except ValueError:
            raise InputError(f"metric {text!r}: the recall level must be a number, as in iprec(r=0.5)") from None
    m = _RANX_RBP.match(s)
    if m is not None:
        return Metric("rbp", p=float("0." + m.group("digits"))), None
    level = None
    m = _RANX_LEVEL.match(s)
    if m is not None:
        s, level = m.group("base"), int(m.group("level"))
        if _RANX_RBP.match(s):
            return _ranx_level(text, Metric("rbp", p=float("0." + s.split(".")[1])), level), None
    m = _GENERAL.match(s)
    if m is None:
        raise NotAMetricName(f"cannot parse metric {text!r}: expected NAME, NAME@K or NAME(PARAMS)@K, e.g. "
                             f"ndcg@10; accepted: {ACCEPTED}")
    name, params, at = m.group("name"), m.group("params"), m.group("at")
    low = name.lower()
    if level is not None and low not in _RANX:
        raise InputError(f"metric {text!r}: the -lN suffix is ranx's, after a ranx name (precision@5-l2); "
                         f"elsewhere write the parameter, as in P(rel=2)@5")
    if low not in _NAMES:
        raise _unknown(text, name, low)
    family, implied = _NAMES[low]
    kwargs = dict(implied)
    kwargs.update(_params(text, params))
    bare = params is None and at is None
    if bare and (low in ("precision", "f1") or (low == "recall" and level is not None)):
        family = _WHOLE_RANKING[low]  # ranx's names without a cutoff (recall only with ranx's -lN: see below)
    elif bare:
        _bare_rules(text, name, low)
    if family == "num_ret" and "rel" in kwargs:
        family = "num_rel_ret"  # ir_measures: NumRet(rel=N) counts documents of grade >= N
    if kwargs.pop("relative", False):
        if family != "set_precision":
            raise InputError(f"metric {text!r}: relative=True belongs to SetP only")
        family = "set_relative_precision"
    depth = None
    if at is not None:
        if family == "iprec":
            kwargs["r"] = _number(text, at, "recall level")
        elif family == "rbp" and params is None:
            raise InputError(f"metric {text!r} is ambiguous: ir_measures reads RBP@K as a cutoff, ranx reads "
                             f"rbp@8 as persistence 0.8; write rbp(p=0.8)@10 for a cutoff or rbp.8 for ranx's")
        elif "k" in kwargs:
            raise InputError(f"metric {text!r}: give the cutoff once, as cutoff= or as @K")
        elif at.isdigit():
            kwargs["k"] = int(at)
        elif symbolic and _SYMBOLIC.match(at):
            kwargs["k"], depth = _SYMBOL_K, at
        else:
            raise InputError(f"metric {text!r}: the cutoff after @ must be a positive integer, e.g. {name}@10")
    metric = Metric(family, **kwargs)
    if level is not None:
        metric = _ranx_level(text, metric, level)
    return metric, depth


def _ranx_level(text: str, metric: Metric, level: int) -> Metric:
    """ranx's -lN: for its binary measures the relevance level; for its graded ones (ndcg, dcg, rbp) it also
    zeroes grades below N, which ragassay's gains never do, so only -l1 (ranx's default) is accepted there."""
    if metric.name in ("ndcg", "dcg", "rbp"):
        if level != 1:
            raise InputError(f"metric {text!r}: ranx's -l{level} on {metric.name} zeroes the gain of grades below "
                             f"{level}; ragassay does not compute that (its gains do not depend on a relevance "
                             f"level); drop -l{level}")
        return metric
    if level < 1:
        raise InputError(f"metric {text!r}: the relevance level is an integer >= 1")
    return replace(metric, rel=level)


def _bare_rules(text: str, name: str, low: str) -> None:
    """Names that without a cutoff mean different things in different tools, or need one."""
    if low == "recall":
        raise InputError(f"metric {text!r} is ambiguous: trec_eval's recall is recall at 5, 10, ..., 1000 and "
                         f"ranx's is recall over the whole ranking; write recall@K (or recall.5,10) or set_recall")
    if low in _TREC_CUTS:
        raise InputError(f"metric {text!r} needs a cutoff: write {name}@K, or {name}.{_TREC_CUTS[low][1]} for "
                         f"trec_eval's default list")
    if low in ("r", "hit_rate"):
        raise InputError(f"metric {text!r} needs a cutoff: write {name}@K")


def _unknown(text: str, name: str, low: str) -> InputError:
    if low in ("ndcg_cut", "map_cut"):
        return InputError(f"metric {text!r}: trec_eval writes {name}.10 (or {name}_10); list cutoffs as "
                          f"{name}.{_TREC_CUTS[low][1]}")
    if low == "iprec_at_recall":
        return InputError(f"metric {text!r}: trec_eval writes iprec_at_recall.0.5 (or iprec_at_recall_0.50); "
                          f"list levels as iprec_at_recall.{_TREC_IPREC_DEFAULT}")
    for tool, names in _NOT_COMPUTED.items():
        if low in names:
            return InputError(f"metric {text!r} ({tool}) is not computed by ragassay; accepted: {ACCEPTED}")
    return NotAMetricName(f"unknown metric {text!r}; accepted: {ACCEPTED}")


def _number(text: str, value: str, what: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise InputError(f"metric {text!r}: the {what} must be a number") from None
    if not math.isfinite(x):
        raise InputError(f"metric {text!r}: the {what} must be finite")
    return x


def _split_params(params: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(params[start:i])
            start = i + 1
    parts.append(params[start:])
    return [p.strip() for p in parts if p.strip()]


def _truth(text: str, key: str, value: str) -> bool:
    low = value.lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise InputError(f"metric {text!r}: {key} is true or false, got {value!r}")


def _params(text: str, params: str | None) -> dict:
    """ragassay's and ir_measures' parameters (k=v, strings quoted or not) as Metric fields."""
    out: dict = {}
    for item in _split_params(params or ""):
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not raw:
            raise InputError(f"metric {text!r}: parameters are key=value, as in P(rel=2)@5")
        value = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"" else raw
        if key in out or (key in ("dcg", "gain") and "gain" in out) or (key in ("recall", "r") and "r" in out):
            raise InputError(f"metric {text!r}: {key} is given twice")
        if key == "rel":
            if not re.fullmatch(r"\d+", value):
                raise InputError(f"metric {text!r}: rel={value}: the relevance level is an integer >= 1")
            out["rel"] = int(value)
        elif key in ("p", "beta"):
            out[key] = _number(text, value, key)
        elif key in ("r", "recall"):
            out["r"] = _number(text, value, "recall level")
        elif key == "cutoff":
            if not value.isdigit():
                raise InputError(f"metric {text!r}: cutoff={value}: must be a positive integer")
            out["k"] = int(value)
        elif key == "gain":
            out["gain"] = value
        elif key == "dcg":  # ir_measures' nDCG formulation
            if value not in ("log2", "exp-log2"):
                raise InputError(f"metric {text!r}: dcg={value}: ir_measures' choices are log2 (gain = grade) "
                                 f"and exp-log2 (gain = 2^grade - 1)")
            out["gain"] = "linear" if value == "log2" else "exp"
        elif key == "judged_only":
            out["judged_only"] = _truth(text, key, value)
        elif key == "relative":
            out["relative"] = _truth(text, key, value)
        elif key == "gains":
            out["gains"] = _gains(text, value)
        else:
            raise InputError(f"metric {text!r}: unknown parameter {key!r}; parameters: rel, judged_only, gain "
                             f"(dcg), gains, p, beta, r (recall), relative, cutoff")
    if out.get("beta") == 1.0:
        del out["beta"]  # F1, the default
    return out


def _gains(text: str, value: str) -> tuple[tuple[int, int], ...] | None:
    """ir_measures' ``gains={0:0,1:1,2:3}``: integer grade -> integer gain; identity entries are dropped, so
    equal maps spell the same."""
    try:
        mapping = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        mapping = None
    if not isinstance(mapping, dict) or not all(
        isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool)
        for a, b in mapping.items()
    ):
        raise InputError(f"metric {text!r}: gains maps integer grades to integer gains, as in gains={{2:3,3:7}}")
    pairs = tuple(sorted((a, b) for a, b in mapping.items() if a != b))
    return pairs or None
