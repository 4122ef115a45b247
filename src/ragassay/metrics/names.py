"""Metric identities: small parseable value objects with one canonical spelling.

``Metric.parse("ndcg@10")`` and ``str(metric) == "ndcg@10"`` round-trip, so names in files, tables, CLI flags
and store rows are the same thing (the ir_measures idea, with ragassay's own spelling).

The spellings people already type are accepted and mapped to the canonical one: ir_measures names
(``nDCG@10``, ``R@100``, ``P@5``, ``AP``, ``RR@10``, ``ERR@10``, ``RBP(p=0.8)``, ``Success@10``, ``Rprec``,
``Bpref``, ``NumRet``, ``NumRel``, ``NumRelRet``, ``SetP``, ``SetR``, ``SetF``, ``IPrec@0.5``, ``infAP``) and
trec_eval names (``ndcg_cut_10``, ``map``, ``map_cut_100``, ``recip_rank``, ``P_5``, ``recall_100``,
``success_10``, ``Rprec``, ``bpref``, ``num_ret``, ``num_rel``, ``num_rel_ret``, ``set_P``, ``set_recall``,
``set_F``, ``iprec_at_recall_0.50``, ``11pt_avg``, ``infAP``, ``gm_map``). :meth:`Metric.ir_measures_name`
writes the ir_measures spelling back, so the mapping is checked against ir_measures' own parser; ``dcg``,
``11pt_avg`` and ``gm_map`` have no ir_measures measure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragassay.errors import InputError

# name -> cutoff rule: "required", "optional" or "none"
_CUTOFF_RULE: dict[str, str] = {
    "recall": "required",
    "precision": "required",
    "success": "required",
    "judged": "required",
    "rr": "optional",
    "ap": "optional",
    "ndcg": "optional",
    "rprec": "none",
    "bpref": "none",
    "err": "optional",
    "rbp": "optional",
    "dcg": "optional",
    "num_ret": "none",
    "num_rel": "none",
    "num_rel_ret": "none",
    "set_precision": "none",
    "set_recall": "none",
    "set_f": "none",
    "iprec": "none",
    "11pt_avg": "none",
    "infap": "none",
    "gm_map": "none",
}

# Other tools' spellings (lower-cased) of the canonical names; applied by Metric.parse.
_ALIASES: dict[str, str] = {
    "ndcg": "ndcg", "r": "recall", "recall": "recall", "p": "precision", "precision": "precision",
    "ap": "ap", "map": "ap", "rr": "rr", "recip_rank": "rr", "err": "err", "rbp": "rbp",
    "success": "success", "judged": "judged", "rprec": "rprec", "r-prec": "rprec", "r_prec": "rprec",
    "bpref": "bpref", "dcg": "dcg", "num_ret": "num_ret", "numret": "num_ret", "num_rel": "num_rel",
    "numrel": "num_rel", "num_rel_ret": "num_rel_ret", "numrelret": "num_rel_ret", "set_p": "set_precision",
    "setp": "set_precision", "set_precision": "set_precision", "set_recall": "set_recall", "setr": "set_recall",
    "set_f": "set_f", "setf": "set_f", "11pt_avg": "11pt_avg", "infap": "infap", "gm_map": "gm_map",
}

# trec_eval's NAME_K measures (``ndcg_cut_10``), keyed by the lower-cased trec_eval name.
_TREC_CUT: dict[str, str] = {"ndcg_cut": "ndcg", "map_cut": "ap", "p": "precision", "recall": "recall",
                             "success": "success"}

# The ir_measures spelling of each canonical name.
_IR_MEASURES: dict[str, str] = {
    "recall": "R", "precision": "P", "success": "Success", "judged": "Judged", "rr": "RR", "ap": "AP",
    "ndcg": "nDCG", "rprec": "Rprec", "bpref": "Bpref", "err": "ERR", "rbp": "RBP", "num_ret": "NumRet",
    "num_rel": "NumRel", "num_rel_ret": "NumRelRet", "set_precision": "SetP", "set_recall": "SetR", "set_f": "SetF",
    "iprec": "IPrec", "infap": "infAP",
}

# The recall levels of trec_eval's iprec_at_recall and 11pt_avg: 0.0, 0.1, ..., 1.0.
IPREC_LEVELS = tuple(i / 10 for i in range(11))

RBP_DEFAULT_P = 0.8  # ir_measures' default persistence

# Common spellings from other tools, used only to suggest the canonical one in an error message.
_SUGGEST: dict[str, str] = {
    "p": "precision",
    "mrr": "rr",
    "recip_rank": "rr",
    "map": "ap",
    "map_cut": "ap",
    "ndcg_cut": "ndcg",
    "r-prec": "rprec",
    "r_prec": "rprec",
    "rprecision": "rprec",
    "hit": "success",
    "hits": "success",
    "hit_rate": "success",
}

_PATTERN = re.compile(r"^([A-Za-z_\-]+|11pt_avg)(?:@(\d+))?$", re.IGNORECASE)
_TREC_PATTERN = re.compile(r"^([A-Za-z_]+?)_(\d+)$")
_RBP_PATTERN = re.compile(r"^rbp\((.*)\)(?:@(\d+))?$", re.IGNORECASE)
# interpolated precision at a recall level: canonical iprec(r=0.5), ir_measures IPrec@0.5, trec_eval
# iprec_at_recall_0.50
_IPREC_PATTERN = re.compile(r"^(?:iprec\(r=([^)]*)\)|iprec@([0-9.]+)|iprec_at_recall_([0-9.]+))$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Metric:
    """A ranking metric identity: ``name``, an optional cutoff ``k``, for RBP the persistence ``p`` and for
    interpolated precision the recall level ``r``."""

    name: str
    k: int | None = None
    p: float | None = None
    r: float | None = None

    def __post_init__(self) -> None:
        rule = _CUTOFF_RULE.get(self.name)
        if rule is None:
            raise InputError(
                f"unknown metric {self.name!r}; known: {', '.join(sorted(_CUTOFF_RULE))} (e.g. ndcg@10, recall@100)"
            )
        if rule == "required" and self.k is None:
            raise InputError(f"metric {self.name!r} needs a cutoff: write {self.name}@K, e.g. {self.name}@10")
        if rule == "none" and self.k is not None:
            raise InputError(f"metric {self.name!r} takes no cutoff: write {self.name}")
        if self.k is not None and self.k < 1:
            raise InputError(f"metric {self.name}@{self.k}: the cutoff must be a positive integer")
        if self.name == "rbp":
            if self.p is None:
                object.__setattr__(self, "p", RBP_DEFAULT_P)
            if not 0.0 < self.p < 1.0:
                raise InputError(f"rbp(p={self.p:g}): the persistence p must lie strictly between 0 and 1")
        elif self.p is not None:
            raise InputError(f"metric {self.name!r} takes no p parameter (only rbp does)")
        if self.name == "iprec":
            if self.r is None or not 0.0 <= self.r <= 1.0:
                raise InputError("iprec needs a recall level r in [0, 1], as in iprec(r=0.5) or IPrec@0.5")
        elif self.r is not None:
            raise InputError(f"metric {self.name!r} takes no recall level (only iprec does)")

    @property
    def geometric(self) -> bool:
        """True for a measure whose mean over queries is geometric (gm_map)."""
        return self.name == "gm_map"

    @classmethod
    def parse(cls, text: str | Metric) -> Metric:
        """Parse the canonical spelling (``recall@10``, ``rr``, ``ap@100``, ``rbp(p=0.8)``) or an ir_measures or
        trec_eval one (``nDCG@10``, ``ndcg_cut_10``, ``P_5``, ``map``); reject others with a hint."""
        if isinstance(text, Metric):
            return text
        s = text.strip()
        m = _RBP_PATTERN.match(s)
        if m is not None:
            return cls("rbp", int(m.group(2)) if m.group(2) else None, _rbp_p(text, m.group(1)))
        m = _IPREC_PATTERN.match(s)
        if m is not None:
            level = next(g for g in m.groups() if g is not None)
            try:
                return cls("iprec", r=float(level))
            except ValueError:
                raise InputError(f"metric {text!r}: the recall level must be a number, as in iprec(r=0.5)") from None
        cut = _TREC_PATTERN.match(s)
        if cut is not None and cut.group(1).lower() in _TREC_CUT:
            return cls(_TREC_CUT[cut.group(1).lower()], int(cut.group(2)))
        m = _PATTERN.match(s)
        if m is None:
            raise InputError(f"cannot parse metric {text!r}: expected NAME or NAME@K, e.g. ndcg@10")
        name, k = m.group(1), m.group(2)
        canonical = _ALIASES.get(name.lower())
        if canonical is None:
            hint = _SUGGEST.get(name.lower())
            fix = f"; did you mean {hint}{'@' + k if k else ''}?" if hint else ""
            raise InputError(
                f"unknown metric {text!r}{fix} (canonical names: {', '.join(sorted(_CUTOFF_RULE))}; ir_measures "
                f"and trec_eval spellings such as nDCG@10, P_5 and recip_rank are accepted too)"
            )
        return cls(canonical, int(k) if k is not None else None)

    def ir_measures_name(self) -> str:
        """The ir_measures spelling: ``nDCG@10``, ``R@100``, ``RBP(p=0.8)``, ``IPrec@0.5``."""
        if self.name not in _IR_MEASURES:
            raise InputError(f"metric {self} has no ir_measures equivalent")
        if self.name == "iprec":
            return f"IPrec@{self.r:g}"
        base = _IR_MEASURES[self.name] + (f"(p={self.p:g})" if self.name == "rbp" else "")
        return base if self.k is None else f"{base}@{self.k}"

    def __str__(self) -> str:
        if self.name == "iprec":
            return f"iprec(r={self.r:g})"
        base = f"rbp(p={self.p:g})" if self.name == "rbp" else self.name
        return base if self.k is None else f"{base}@{self.k}"


def _rbp_p(text: str, args: str) -> float | None:
    if not args.strip():
        return None
    key, sep, value = args.partition("=")
    if not sep or key.strip().lower() != "p":
        raise InputError(f"metric {text!r}: rbp takes only p, as in rbp(p=0.8); relevance is the run's relevance "
                         f"threshold")
    try:
        return float(value)
    except ValueError:
        raise InputError(f"metric {text!r}: p must be a number, as in rbp(p=0.8)") from None


def canonical_name(text: str) -> str:
    """The stored spelling of any metric name: ranking metrics in any accepted spelling become canonical
    (``nDCG@5`` -> ``ndcg@5``, ``nDCG@final_k`` -> ``ndcg@final_k``); other names (``answer_f1``) are returned
    as given, since they have only one spelling."""
    try:
        return str(Metric.parse(text))
    except InputError:
        pass
    head, sep, depth = text.strip().partition("@")
    if sep and not depth.isdigit() and head.lower() in _ALIASES:
        return f"{_ALIASES[head.lower()]}@{depth}"
    return text.strip()
