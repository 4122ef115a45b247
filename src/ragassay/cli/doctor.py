"""`ragassay doctor`: is this environment and this project set up to give numbers one can trust?

Each check is a PASS / WARN / FAIL line with the docs page that explains it and the fix. Environment: Python
and package versions, the optional extras, writable working folder, Chromium for the report's browser test.
Project (what is given): the anti-patterns that can be seen in files (the table in docs/importers.md) —

- labels tied to chunk ids: evidence keyed by ``chunk_id`` / ``unit_id`` / ``passage_id`` in a golden set or
  its authoring file (FAIL: any re-chunking invalidates them);
- no negative (unanswerable) queries (WARN);
- a golden set too small for the minimum effect its gate policy declares, counting for each metric only the
  queries it is defined on (``stats.power``; WARN);
- single-trial runs of a stochastic pipeline (an llm generator) in the store or among the configs (WARN);
- a reranker offered no more candidates than it keeps: ``fusion.depth <= reranker.final_k`` (WARN);
- a gate policy on a raw threshold (``threshold:``, ``min_value:`` ...) instead of a paired interval and a
  minimum effect (FAIL);
- an unvalidated judge behind stored judge metrics (WARN);
- a judge metric whose judge gave a verdict on under :data:`JUDGED_FLOOR` of the answers it could judge (WARN);
- a judge of the generator's model family (self-preference; WARN);
- a golden set built against another corpus, or older than corpus files that changed since (FAIL / WARN);
- metrics without a stated hit rule, in the golden manifest or a stored run (FAIL);
- stored runs of a purely synthetic golden set (WARN: report deltas, not absolute scores);
- golden labels with no agreement record: no kappa in the manifest, or kappa typed by hand (WARN);
- a stratum the stored runs saturate still in the regression tier (the gate tier) of a ``--tiers`` file (WARN).

Exit codes like ``gate``: 0 when nothing FAILs (PASS or WARN), 1 on a FAIL, 2 on bad input.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli.checks import number, refuse
from ragassay.cli.common import EXIT_FAIL, console, print_json
from ragassay.errors import InputError

EXTRAS = {"dense": ["torch", "sentence-transformers"], "llm": ["anthropic", "openai"], "ray": ["ray"],
          "dev": ["pytest", "pytrec-eval-terrier", "ir-measures", "ranx", "opentelemetry-sdk"]}
CORE = ["numpy", "scipy", "duckdb", "pyarrow", "pydantic", "typer", "rich"]
CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "headless_shell")


@dataclass
class Check:
    area: str
    verdict: str  # PASS | WARN | FAIL
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment_checks(workdir: Path) -> list[Check]:
    out = []
    py = sys.version_info
    out.append(Check("python", "PASS" if py >= (3, 11) else "FAIL", f"Python {py.major}.{py.minor}.{py.micro}",
                     "" if py >= (3, 11) else "install Python 3.11 or newer"))
    missing = [d for d in CORE if _version(d) is None]
    out.append(Check("core packages", "FAIL" if missing else "PASS",
                     ", ".join(f"{d} {_version(d)}" for d in CORE if d not in missing)
                     + (f"; missing {', '.join(missing)}" if missing else ""),
                     "pip install ragassay (with -c constraints.txt)" if missing else ""))
    for extra, dists in EXTRAS.items():
        absent = [d for d in dists if _version(d) is None]
        out.append(Check(f"extra [{extra}]", "WARN" if absent else "PASS",
                         "installed" if not absent else f"missing {', '.join(absent)}",
                         f"pip install 'ragassay[{extra}]' if you need it" if absent else ""))
    try:
        with tempfile.NamedTemporaryFile(dir=workdir, prefix=".ragassay-doctor-"):
            pass
        out.append(Check("working folder", "PASS", f"{workdir} is writable"))
    except OSError as e:
        out.append(Check("working folder", "FAIL", f"{workdir}: {e.strerror}", "run from a folder you can write to"))
    browser = next((shutil.which(b) for b in CHROMIUM if shutil.which(b)), None)
    if browser is None:
        cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
        browser = next((str(p) for p in cache.glob("chromium*")), None) if cache.is_dir() else None
    out.append(Check("chromium", "PASS" if browser else "WARN", browser or "no headless Chromium found",
                     "" if browser else "only the report's browser test needs it: apt-get install chromium"))
    return out


def store_checks(path: Path) -> list[Check]:
    from ragassay.errors import RagassayError
    from ragassay.store import Store

    if not path.exists():
        return [Check("store", "WARN", f"{path} does not exist yet", "it is created by the first run or score")]
    try:
        with Store.open(path, read_only=True) as st:
            runs = st.list_runs()
            version = st.connection.execute("SELECT version FROM schema_info").fetchone()[0]
    except RagassayError as e:
        return [Check("store", "FAIL", str(e).splitlines()[0], "see the message; `ragassay export` then a new store")]
    out = [Check("store", "PASS", f"{path}: schema version {version}, {len(runs)} run(s)")]
    single = [r.name for r in runs if (r.trials or 1) == 1 and _stochastic(r.config)]
    if single:
        out.append(Check("trials", "WARN", f"{len(single)} run(s) of a stochastic pipeline (llm generator) with one "
                         f"trial: {', '.join(single[:5])} (see docs/runs.md)",
                         "rerun with --trials 3 or more so its own noise is measured apart from a change"))
    no_rule = [r.name for r in runs if not r.hit_rule]
    if no_rule:
        out.append(Check("hit rule", "FAIL", f"{len(no_rule)} stored run(s) without a hit rule: "
                         f"{', '.join(no_rule[:5])} (see docs/corpus-and-golden.md)",
                         "re-score them with ragassay score --hit-rule any_overlap|min_fraction:F|doc"))
    out += judge_checks(path, runs)
    out += judged_fraction_checks(runs)
    out += self_preference_checks(runs)
    return out


def _llm_generator(config) -> dict | None:
    """The llm generator section of a stored or loaded pipeline config (a dict or its JSON), None otherwise."""
    if isinstance(config, str):
        import json

        try:
            config = json.loads(config)
        except ValueError:
            return None
    gen = config.get("generator") if isinstance(config, dict) else None
    return gen if isinstance(gen, dict) and gen.get("kind") == "llm" else None


def _stochastic(config) -> bool:
    """A pipeline whose answers vary run to run: an llm generator (the extractive one is deterministic)."""
    return _llm_generator(config) is not None


def judge_checks(path: Path, runs) -> list[Check]:
    """Stored judge metrics whose judge does not meet the gate's floor: one line per judge, saying
    whether it was never validated or was validated and fell short, on which labels, and what that means."""
    from ragassay.judges.config import judge_settings
    from ragassay.judges.validate import METRIC_KIND, METRIC_SCALE, Floor, matching_validation
    from ragassay.store import Store

    floor = Floor()
    # (judge model, rubric, prompt, settings, kind, scale) -> the metrics and runs it scored, the record the
    # gate would use for them (validate.matching_validation) and whether that record meets the floor
    judges: dict[tuple, dict] = {}
    with Store.open(path, read_only=True) as st:
        for rec in runs:
            pins = (rec.extra or {}).get("judge")
            if not isinstance(pins, dict):
                continue
            for m in st.metrics(rec.run_id):
                if m not in METRIC_KIND:
                    continue
                key = (pins.get("judge_model"), pins.get("rubric_sha"), pins.get("prompt_sha"),
                       judge_settings(pins), METRIC_KIND[m], METRIC_SCALE[m])
                if key not in judges:
                    record, _ = matching_validation(st, pins, m)
                    judges[key] = {"metrics": set(), "runs": [], "record": record,
                                   "ok": floor.check(record)[0]}
                j = judges[key]
                j["metrics"].add(m)
                if rec.name not in j["runs"]:
                    j["runs"].append(rec.name)
    if not judges:
        return []
    short = [(key, j) for key, j in judges.items() if not j["ok"]]
    if not short:
        n = sum(len(j["metrics"]) * len(j["runs"]) for j in judges.values())
        return [Check("judges", "PASS", f"{n} judge metric(s) over {len(judges)} judge(s), every judge meets the "
                      f"floor ({_floor_text(floor)})")]
    return [_judge_warning(key[0], j, floor) for key, j in short]


def _floor_text(floor) -> str:
    return (f"at the lower end of each 95% interval kappa >= {floor.min_kappa:g} and every class recall >= "
            f"{floor.min_class_recall:g}, over at least {floor.min_items} items and {floor.min_per_class} per "
            "class")


def _judge_warning(model: str, j: dict, floor) -> Check:
    """The WARN line for one judge below the floor: never validated, or validated and short of the floor."""
    runs = j["runs"]
    scored = (f"{', '.join(sorted(j['metrics']))} on {len(runs)} run(s) ({', '.join(runs[:4])}"
              f"{', ...' if len(runs) > 4 else ''}) were scored by judge {model}")
    bar = f"the gate's floor: {_floor_text(floor)}; the target kappa for gating is 0.7"
    consequence = "until then these metrics can neither PASS nor FAIL a gate (WARN [unvalidated])"
    rec = j["record"]
    if rec is None:
        return Check("judges", "WARN", f"{scored}, which has no validation record for these pins (see "
                     "docs/judge-validation.md)",
                     f"ragassay judge validate --judge JUDGE.yaml --labels LABELS.jsonl ({bar}); {consequence}")
    _, why = floor.check(rec)
    labels = ("the bundled calibration set, labelled by two blind automated annotators, not people"
              if rec.get("label_set_version") == _bundled_label_version() else f"label set {rec.get('label_set')}")
    return Check("judges", "WARN",
                 f"{scored}, which was validated and falls below the floor: {why.split(' (')[0]} on "
                 f"n = {rec.get('n')} of the {rec.get('n_items')} items of {labels} "
                 f"(validation {rec.get('validation_id')}) (see docs/judge-validation.md)",
                 f"score them with a judge (a stronger model, or a cascade) that meets the floor on labels from "
                 f"your own domain ({bar}); {consequence}")


def _bundled_label_version() -> str | None:
    """The version (content sha) of the bundled judge calibration labels, None if this install has none."""
    from ragassay.judges.labels import bundled_labels, load_labels

    path = bundled_labels()
    return load_labels(path).version if path is not None else None


CHUNK_KEYS = ("chunk_id", "chunk_ids", "unit_id", "unit_ids", "passage_id", "chunk", "relevant_chunks")
RAW_THRESHOLD_KEYS = ("threshold", "min", "min_value", "max", "max_value", "target", "absolute", "min_score",
                      "pass_if")


def _raw_queries(path: Path) -> list[dict]:
    """The query records of a built golden set (folder) or an authoring file, read without schema validation
    so that files the golden-set loaders refuse can still be diagnosed. The file itself is read as `golden
    build` reads it (``ragassay.yamlio``): not UTF-8, invalid YAML, a duplicate key or an alias bomb is refused
    the same way, never diagnosed as an empty set."""
    import json

    from ragassay.yamlio import load_yaml, read_utf8

    src = path / "golden.jsonl" if path.is_dir() else path
    if not src.is_file():
        raise InputError(f"{path}: no golden set here (a built folder with golden.jsonl, or a .yaml / .jsonl "
                         "authoring file)")
    if src.suffix in (".yaml", ".yml"):
        data = load_yaml(src, "golden set") or {}
        queries = data.get("queries", []) if isinstance(data, dict) else data
    else:
        queries = []
        for n, line in enumerate(read_utf8(src, "golden set").splitlines(), 1):
            if line.strip():
                try:
                    queries.append(json.loads(line))
                except ValueError:
                    raise InputError(f"{src}:{n}: not a JSON object; fix the line") from None
    return [q for q in queries if isinstance(q, dict)]


def label_checks(path: Path) -> tuple[list[Check], int]:
    """Chunk-id labels and negative queries, from the raw records; also returns the number of queries."""
    queries = _raw_queries(path)
    tied = []
    for q in queries:
        keys = set(q) | {k for e in q.get("evidence") or [] if isinstance(e, dict) for k in e}
        if keys & set(CHUNK_KEYS):
            tied.append(str(q.get("query_id", "?")))
    out = []
    if tied:
        out.append(Check("labels", "FAIL", f"{len(tied)} of {len(queries)} queries label chunk ids, not text: "
                         f"{', '.join(tied[:5])} (see docs/corpus-and-golden.md)",
                         "label evidence as {doc_id, quote}, resolved to character spans by ragassay golden build, "
                         "so the labels hold for any chunking"))
    else:
        out.append(Check("labels", "PASS", f"{len(queries)} queries labelled by text spans, not chunk ids"))
    neg = sum(q.get("answerable") is False for q in queries)
    out.append(Check("negative queries", "PASS" if neg else "WARN", f"{neg} of {len(queries)} unanswerable",
                     "" if neg else "add unanswerable questions, or abstention and over-refusal go unmeasured "
                     "(see docs/corpus-and-golden.md)"))
    return out, len(queries)


# Metric families defined on answerable queries only: the ranking metrics that are NaN when a query has no
# relevant evidence (metrics/retrieval.py: "undefined ... when R = 0"), the answer metrics scored against a
# reference answer or only where the question has one (analysis/scoring.py: answer_f1, answer_em,
# over_refusal) and the judge metrics that need a reference or nuggets (correctness, the nugget scores).
# abstention_recall is the converse: defined on unanswerable queries only.
ANSWERABLE_ONLY = frozenset({"recall", "success", "rr", "ap", "ndcg", "rprec", "bpref", "set_recall", "set_f", "f1",
                             "iprec", "11pt_avg", "infap", "gm_map", "err", "answer_f1", "answer_em",
                             "over_refusal", "correctness", "nugget_v_strict", "nugget_v", "nugget_a_strict",
                             "nugget_a"})
UNANSWERABLE_ONLY = frozenset({"abstention_recall"})


def defined_on(metric: str) -> str:
    """Which golden queries ``metric`` (a canonical name, ``ndcg@10``) can be defined on: ``answerable``,
    ``unanswerable`` or ``all``, from its family (the name before any ``@cutoff`` or ``(parameters)``)."""
    family = re.split(r"[@(]", metric, maxsplit=1)[0].lower()
    return "answerable" if family in ANSWERABLE_ONLY else "unanswerable" if family in UNANSWERABLE_ONLY else "all"


def policy_checks(path: Path, queries: list[dict] | None, sigma_d: float) -> list[Check]:
    """A gate on raw thresholds, and a golden set too small for the declared minimum effects.

    The sample size of a metric is the number of queries it can be defined on (:func:`defined_on`): a metric
    undefined on negatives (recall, ndcg, answer_f1 ...) compares only the answerable queries, so a set of
    60 with 20 negatives gives recall the MDE of n = 40, (z_0.975 + z_0.8) sigma_d / sqrt(40)."""
    from ragassay.analysis.gate import load_policy
    from ragassay.stats import mde_paired, n_for_mde
    from ragassay.yamlio import load_yaml_node

    data, _ = load_yaml_node(path, "gate policy")
    raw = []
    if isinstance(data, dict):
        raw += [f"{k}:" for k in data if k in ("thresholds", *RAW_THRESHOLD_KEYS)]
        for m, entry in (data.get("metrics") or {}).items() if isinstance(data.get("metrics"), dict) else []:
            if isinstance(entry, dict):
                raw += [f"{m}.{k}" for k in entry if k in RAW_THRESHOLD_KEYS]
            elif isinstance(entry, (int, float)):
                raw.append(f"{m}: {entry}")
    if raw:
        return [Check("gate policy", "FAIL", f"{path}: gates on raw thresholds ({', '.join(raw[:4])}) with no "
                      "interval: a single noisy run decides (see docs/runs.md)",
                      "gate on the paired change: metrics: {METRIC: {min_effect: 0.03}} fails only a credible "
                      "regression at least that large")]
    pol = load_policy(path)
    out = [Check("gate policy", "PASS", f"{path}: paired intervals with minimum effects on "
                 f"{', '.join(pol.metrics)}")]
    if not queries:
        return out
    neg = sum(q.get("answerable") is False for q in queries)
    n_of = {"all": len(queries), "answerable": len(queries) - neg, "unanswerable": neg}
    # (metric, queries it is defined on, which ones, min_effect); a metric defined on no query has no MDE
    sizes = [(m, n_of[defined_on(m)], defined_on(m), p.min_effect) for m, p in pol.metrics.items()]
    none = [f"{m} (no {which} query)" for m, n, which, _ in sizes if n == 0]
    if none:
        out.append(Check("sample size", "WARN", f"{', '.join(none)}: undefined on every query of the golden set, "
                         "so the gate can never judge it (see docs/stats.md)",
                         "add queries the metric is defined on, or drop it from the policy"))
    small = [(m, n, which, eff) for m, n, which, eff in sizes if n and mde_paired(n, sigma_d) > eff]
    if small:
        # the metric furthest from its minimum effect
        m, n, which, eff = max(small, key=lambda x: mde_paired(x[1], sigma_d) / x[3])
        which = "all" if n == len(queries) else which  # a set without negatives: every query counts
        counted = (f"{n} queries" if which == "all" else
                   f"{n} {which} queries (of {len(queries)}; {m} is undefined on the others)")
        more = f"; {len(small) - 1} more metric(s) fall short too" if len(small) > 1 else ""
        out.append(Check("sample size", "WARN", f"{counted} detect a change of {mde_paired(n, sigma_d):.3f} at 80% "
                         f"power (sigma_d {sigma_d:g}); the policy asks for {eff:g} on {m}{more} (see "
                         "docs/stats.md)",
                         f"{n_for_mde(eff, sigma_d)} {'' if which == 'all' else which + ' '}queries for that "
                         "effect, or a larger min_effect; measure sigma_d with ragassay compare (its σ_d column) "
                         "and pass --sigma-d"))
    elif not none:
        least = min(n for _, n, _, _ in sizes)
        counted = (f"{least} queries" if least == len(queries) else
                   f"each metric's queries (at least {least} of {len(queries)}: the answerable or unanswerable "
                   "ones for a metric defined only there)")
        out.append(Check("sample size", "PASS", f"{counted} detect every policy minimum effect at 80% power "
                         f"(sigma_d {sigma_d:g})"))
    return out


def config_checks(configs: list[Path], store: Path) -> list[Check]:
    """Stochastic configs (llm generator) never run with several trials in the store, and a reranker offered
    no more candidates than it keeps."""
    from ragassay.pipeline.config import load_config
    from ragassay.store import Store
    from ragassay.trace.schema import config_sha

    multi: set[str] = set()
    if store.exists():
        with Store.open(store, read_only=True) as st:
            multi = {r.config_sha for r in st.list_runs() if (r.trials or 1) > 1 and r.config_sha}
    out = []
    for path in configs:
        cfg = load_config(path)
        hashed = cfg.hashed()  # what a run stores and hashes into its config sha
        if not _stochastic(hashed):
            out.append(Check("config", "PASS", f"{path}: deterministic pipeline (extractive generator)"))
        elif config_sha(hashed) in multi:
            out.append(Check("config", "PASS", f"{path}: stochastic, run with several trials"))
        else:
            out.append(Check("trials", "WARN", f"{path}: an llm generator is stochastic, and no stored run of it "
                             "has more than one trial (see docs/runs.md)",
                             "ragassay run CONFIG --trials 3 (or more); compare then resamples whole queries"))
        r, depth = cfg.reranker, cfg.fusion.depth
        if r.kind != "none" and not cfg.oracle and depth <= r.final_k:
            out.append(Check("reranker", "WARN", f"{path}: fusion.depth {depth} <= reranker.final_k {r.final_k}: "
                             f"the {r.kind} reranker is offered no more candidates than it keeps, so it only "
                             "reorders the fused list and can bring nothing up from below it (see "
                             "docs/pipeline.md)",
                             "raise fusion.depth well above final_k (the bundled hybrid_rerank config reranks 50 "
                             "to keep 5), or set reranker.kind: none"))
    return out


def model_family(model: str | None) -> str | None:
    """The model family of a judge or generator model name: the leading letters of the name after any
    provider or organisation prefix, lower-cased (``openai:gpt-4o`` -> gpt, ``claude-sonnet-4`` -> claude,
    ``meta-llama/Llama-3.1-8B`` -> llama), with the vendors' other spellings folded in (``o3-mini`` -> gpt,
    ``Meta-Llama-3`` -> llama, ``mixtral`` -> mistral). None for a local judge or an unnamed model."""
    if not model or model.startswith("local:"):
        return None
    head = re.match(r"[a-z]+", re.split(r"[:/]", model.lower())[-1])
    return None if head is None else FAMILY_ALIASES.get(head[0], head[0])


FAMILY_ALIASES = {"o": "gpt", "chatgpt": "gpt", "meta": "llama", "codellama": "llama", "mixtral": "mistral",
                  "ministral": "mistral", "codestral": "mistral"}


def _self_preference(where: str, judge: str, generator: str) -> Check | None:
    """The WARN line for a judge of the generator's own model family, None for two families."""
    family = model_family(judge)
    if family is None or family != model_family(generator):
        return None
    return Check("self-preference", "WARN",
                 f"{where}: judge {judge} and generator {generator} are both {family} models; a judge tends to "
                 "rate its own family's answers higher, so these judge metrics may read high (see "
                 "docs/judge-validation.md)",
                 f"judge with a model of another family, or measure the bias: ragassay judge validate --judge-family "
                 f"{family} on labels that carry generator_family")


def _generator_model(config) -> str | None:
    gen = _llm_generator(config)
    return None if gen is None or not gen.get("model") else str(gen["model"])


def self_preference_checks(runs) -> list[Check]:
    """Stored runs judged by a model of their own generator's family (judge pins vs the run's config)."""
    out = []
    for rec in runs:
        pins = (rec.extra or {}).get("judge")
        gen = _generator_model(rec.config)
        if isinstance(pins, dict) and gen:
            found = _self_preference(f"run {rec.name}", str(pins.get("judge_model")), gen)
            out += [found] if found else []
    return out


def judge_config_checks(judge: Path, configs: list[Path]) -> list[Check]:
    """The --judge config against each --config's llm generator: same model family (self-preference)?"""
    from ragassay.judges.config import load_judge_config
    from ragassay.pipeline.config import load_config

    model = load_judge_config(judge).pins()["judge_model"]
    gens = {path: _generator_model(load_config(path).hashed()) for path in configs}
    out = [c for path, gen in gens.items() if gen
           for c in [_self_preference(f"{judge} judging {path}", model, gen)] if c is not None]
    if out:
        return out
    llm = [gen for gen in gens.values() if gen]
    return [Check("self-preference", "PASS", f"{judge} ({model}): " + (
        f"of another model family than the llm generator(s) {', '.join(sorted(set(llm)))}" if llm
        else "no --config has an llm generator to share a family with"))]


# The least share of the answers a judge metric could be judged on that must have got a verdict; under it the
# metric's mean speaks for a subset the judge's failures chose, not for the run.
JUDGED_FLOOR = 0.9


def judged_fraction_checks(runs) -> list[Check]:
    """Per stored run, each judge metric's judged fraction: answers with a verdict / answers it could be judged
    on. The denominator leaves out answers where the metric is undefined by definition (not answered, no
    claims, no citations, no reference ...) and keeps those whose judge call failed (``judge_error``,
    ``judge_refused``, ``judge_malformed`` ..., or ``not_started``), read from the judge summary the run
    stores. Under :data:`JUDGED_FLOOR` is a WARN; no judgeable answer (0 / 0) is left out, not counted as 0."""
    out, n_metrics = [], 0
    for rec in runs:
        summary = (rec.extra or {}).get("judge_summary")
        if not isinstance(summary, dict) or not isinstance(summary.get("metrics"), dict):
            continue
        failed: dict[str, dict[str, int]] = {}
        for u in summary.get("undefined") or []:
            reason = str(u.get("reason"))
            if reason == "not_started" or reason.startswith("judge_"):
                failed.setdefault(u.get("metric"), {})[reason] = int(u.get("count") or 0)
        low = []
        for m, v in sorted(summary["metrics"].items()):
            defined, lost = int(v.get("defined") or 0), sum(failed.get(m, {}).values())
            if defined + lost == 0:
                continue
            n_metrics += 1
            if defined / (defined + lost) < JUDGED_FLOOR:
                why = ", ".join(f"{r} {n}" for r, n in sorted(failed[m].items()))
                low.append(f"{m} {defined} of {defined + lost} ({defined / (defined + lost):.0%}; {why})")
        if low:
            out.append(Check("judged fraction", "WARN", f"run {rec.name}: the judge gave a verdict on under "
                             f"{JUDGED_FLOOR:.0%} of the answers it could judge: {'; '.join(low)}; each mean "
                             "speaks only for the answers that were judged (see docs/judges.md)",
                             f"ragassay judge {rec.name} --judge JUDGE.yaml --resume asks again the calls that "
                             "errored or never started (paid answers come from the store); for refusals or "
                             "malformed output, fix the judge's model or settings"))
    if n_metrics and not out:
        out.append(Check("judged fraction", "PASS", f"{n_metrics} stored judge metric(s), each with a verdict on "
                         f"at least {JUDGED_FLOOR:.0%} of the answers it could judge"))
    return out


def golden_checks(golden: Path, corpus: Path | None) -> tuple[list[Check], dict | None]:
    """The checks of a golden set and its corpus, and the built set's manifest (None for an authoring file)."""
    from ragassay.corpus import load_corpus
    from ragassay.golden import load_golden

    out, _ = label_checks(golden)
    if not golden.is_dir():  # an authoring file: its labels are all there is to check before it is built
        return out, None
    gs = load_golden(golden)
    m = gs.manifest
    out.insert(0, Check("golden set", "PASS", f"{golden}: {len(gs)} queries, dataset {gs.dataset_version}"))
    out.append(Check("hit rule", "PASS" if m.get("hit_rule") else "FAIL", f"hit rule {m.get('hit_rule')!r}",
                     "" if m.get("hit_rule") else "rebuild the golden set: the manifest must state its hit rule "
                     "(see docs/corpus-and-golden.md)"))
    out.append(agreement_check(m))
    if corpus is not None:
        corp = load_corpus(corpus)
        ok = m.get("corpus_digest") == corp.digest
        out.append(Check("pins", "PASS" if ok else "FAIL",
                         f"golden corpus digest {m.get('corpus_digest')} vs corpus {corp.digest}",
                         "" if ok else "rebuild the golden set against this corpus (ragassay golden build)"))
        built = m.get("built_at")
        files = [p for p in Path(corpus).rglob("*") if p.is_file()] if Path(corpus).is_dir() else [Path(corpus)]
        newest = max((p.stat().st_mtime for p in files), default=None)
        if built and newest is not None:
            built_ts = dt.datetime.fromisoformat(built.replace("Z", "+00:00")).timestamp()
            stale = newest > built_ts and not ok
            out.append(Check("freshness", "WARN" if stale else "PASS",
                             "corpus files changed after the golden set was built" if stale
                             else "golden set built against the current corpus",
                             "rebuild and re-review the golden set" if stale else ""))
    return out, m


KAPPA_FIELDS = ("kappa_binary", "kappa_graded")


def _kappa_text(m: dict) -> str:
    return ", ".join(f"{k} {'undefined' if m.get(k) is None else format(m[k], '.3f')}" for k in KAPPA_FIELDS)


def agreement_check(manifest: dict) -> Check:
    """Do the golden labels carry an agreement record? WARN when the manifest has no kappa at all (both
    ``kappa_binary`` and ``kappa_graded`` null: nobody measured whether two annotators would label the same
    way), or when its kappa was typed into the authoring file (``kappa_source: declared``) rather than
    computed from annotators' label files; a manifest built before ``kappa_source`` existed counts by its
    values alone."""
    source = manifest.get("kappa_source")
    who = ", ".join(manifest.get("annotators") or []) or "none named"
    fix = ("have two or more annotators label the same items, measure them with ragassay golden agree A.jsonl "
           "B.jsonl --golden G and build with the label files (golden build --agreement A.jsonl --agreement "
           "B.jsonl) so the manifest's kappa is computed, not typed (see docs/labels.md)")
    if all(manifest.get(k) is None for k in KAPPA_FIELDS):
        how = " (computed, but undefined: every label the same, or no item in common)" if source == "computed" \
            else ""
        return Check("agreement", "WARN", f"the golden labels have no agreement record: {_kappa_text(manifest)}"
                     f"{how} (annotators: {who}); a label no second person checked may be the annotator's own "
                     "reading (see docs/labels.md)", fix)
    if source == "declared":
        return Check("agreement", "WARN", f"the manifest's {_kappa_text(manifest)} were declared in the authoring "
                     f"file, not computed from label files (annotators: {who}); nothing checks them (see "
                     "docs/labels.md)", fix)
    return Check("agreement", "PASS", f"{_kappa_text(manifest)}"
                 f"{' computed from the label files' if source == 'computed' else ''} (annotators: {who})")


def _all_synthetic(sources) -> bool:
    """A golden source mix (``{source: count}``) with items, every one of them synthetic."""
    return isinstance(sources, dict) and bool(sources) and set(sources) == {"synthetic"}


def synthetic_checks(store: Path, manifest: dict | None) -> list[Check]:
    """Stored runs scored on a golden set whose items are all synthetic: the run's recorded
    ``golden_sources``, or the ``--golden`` manifest's ``source_mix`` for the runs of its dataset version.
    Synthetic questions are single-hop and lexically close to their passage, so absolute means flatter
    every system; a delta between two runs on the same set still measures the change."""
    from ragassay.store import Store

    runs = []
    if store.exists():
        with Store.open(store, read_only=True) as st:
            runs = st.list_runs()
    version = manifest.get("dataset_version") if manifest and _all_synthetic(manifest.get("source_mix")) else None
    hit = [r for r in runs if _all_synthetic((r.extra or {}).get("golden_sources"))
           or (version is not None and r.dataset_version == version)]
    if hit:
        sets = sorted({r.dataset_version or "unknown version" for r in hit})
        return [Check("synthetic golden", "WARN",
                      f"{len(hit)} stored run(s) scored on a golden set whose items are all synthetic "
                      f"({', '.join(sets[:3])}): {', '.join(r.name for r in hit[:5])}"
                      f"{', ...' if len(hit) > 5 else ''}; report deltas, not absolute scores (see docs/labels.md)",
                      "quote the change between runs on this set, not their levels: synthetic questions are "
                      "single-hop and worded like their passage, so every system reads high; add questions people "
                      "wrote or asked (source: human or production) before quoting an absolute score")]
    if manifest is None:
        return []
    mix = ", ".join(f"{k} {v}" for k, v in (manifest.get("source_mix") or {}).items()) or "no items"
    why = "no stored run scores it" if version is not None else "not purely synthetic"
    return [Check("synthetic golden", "PASS", f"golden sources: {mix} ({why})")]


def _tiers_problems(data) -> list[str]:
    """What a tier file lacks to be checked: the keys `golden status --tiers-out` writes, with their types."""
    if not isinstance(data, dict):
        return ["its body is not a mapping"]
    problems = []
    if not isinstance(data.get("dataset_version"), str):
        problems.append("dataset_version: missing or not a string")
    metrics = data.get("metrics")
    if not (isinstance(metrics, list) and metrics and all(isinstance(m, str) for m in metrics)):
        problems.append("metrics: missing or not a list of metric names")
    rule = data.get("rule")
    if not isinstance(rule, dict):
        problems.append("rule: missing or not a mapping")
    else:
        for key, kinds in (("threshold", (int, float)), ("ci_floor", (int, float)), ("smoke_size", int),
                           ("seed", int)):
            v = rule.get(key)
            if isinstance(v, bool) or not isinstance(v, kinds):
                problems.append(f"rule.{key}: missing or not a number")
    gate = (data.get("tiers") or {}).get("regression") if isinstance(data.get("tiers"), dict) else None
    ids = gate.get("query_ids") if isinstance(gate, dict) else None
    if not (isinstance(ids, list) and all(isinstance(q, str) for q in ids)):
        problems.append("tiers.regression.query_ids: missing or not a list of query ids")
    return problems


def tier_checks(tiers: Path, golden: Path, store: Path) -> list[Check]:
    """A stratum the stored runs saturate whose items the tier file still puts in the regression tier, the
    tier that gates a change (spec §14.1): the gate spends its time where no configuration can move, when a
    saturated stratum belongs in smoke (§13.6). Saturation is `golden status`'s rule
    (:func:`ragassay.analysis.golden_status.stored_golden_status`) with the metrics and rule the tier file
    was written with, over the store's runs now."""
    from ragassay.analysis.golden_status import stored_golden_status
    from ragassay.cli.golden_status import TIERS_HEADER
    from ragassay.golden import load_golden
    from ragassay.golden.status import StatusOptions
    from ragassay.store import Store
    from ragassay.yamlio import load_yaml, read_utf8

    text = read_utf8(tiers, "golden tiers")
    if text.split("\n", 1)[0].rstrip("\r") != TIERS_HEADER:
        raise InputError(f"{tiers}: not a tier file (its first line is not the `# ragassay golden tiers` header); "
                         "write one with ragassay golden status --golden G --tiers-out FILE")
    data = load_yaml(tiers, "golden tiers")
    problems = _tiers_problems(data)
    if problems:
        raise InputError("\n".join(f"{tiers}: {p}; rewrite it with ragassay golden status --tiers-out"
                                    for p in problems))
    if not golden.is_dir():
        raise InputError(f"{golden}: --tiers needs the built golden set folder the tiers were written for")
    gs = load_golden(golden)
    if data["dataset_version"] != gs.dataset_version:
        raise InputError(f"{tiers}: written for golden version {data['dataset_version']!r}, but --golden is "
                         f"{gs.dataset_version!r}; pass the set it was written for, or rewrite the tiers")
    if not store.exists():
        raise InputError(f"{store}: no such store; saturation is read from stored runs, pass them with --store")
    stratum_of = {q.query_id: q.stratum for q in gs.queries}
    gate = data["tiers"]["regression"]["query_ids"]
    unknown = [q for q in gate if q not in stratum_of]
    if unknown:
        raise InputError(f"{tiers}: the regression tier names {len(unknown)} query id(s) the golden set does not "
                         f"hold ({', '.join(unknown[:5])}); rewrite it with ragassay golden status --tiers-out")
    rule = data["rule"]
    options = StatusOptions(threshold=float(rule["threshold"]), ci_floor=float(rule["ci_floor"]),
                            smoke_size=rule["smoke_size"], seed=rule["seed"])
    with Store.open(store, read_only=True) as st:
        rep = stored_golden_status(st, gs, metrics=data["metrics"], options=options)
    size = {s["stratum"]: s["n_items"] for s in rep["strata"]}
    gating = {s: sum(stratum_of[q] == s for q in gate) for s in rep["saturated_strata"]}
    gating = {s: n for s, n in gating.items() if n}
    metrics = ", ".join(data["metrics"])
    rule_text = (f"every configuration's mean >= {options.threshold:g} with saturation bound >= "
                 f"{options.ci_floor:g} on {metrics}, over {len(rep['configs'])} configuration(s) stored")
    if not gating:
        saturated = ", ".join(rep["saturated_strata"]) or "none"
        return [Check("tiers", "PASS", f"{tiers}: no stratum the stored runs saturate is in the regression tier "
                      f"(saturated: {saturated}; {rule_text})")]
    listed = ", ".join(f"{s} ({n} of its {size[s]} items)" for s, n in gating.items())
    return [Check("tiers", "WARN", f"{tiers}: saturated stratum(s) still in the regression tier, the one that "
                  f"gates a change: {listed}; saturated = {rule_text}. The gate spends its time where no "
                  "configuration can move (see docs/labels.md)",
                  f"retire them to smoke: ragassay golden status --golden {golden} --store {store} --tiers-out "
                  f"{tiers} rewrites the tiers from the stored runs, so the items every configuration passes "
                  "and no run failed leave the regression tier; then build a harder stratum in their place")]


def doctor(
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file to check."),
    golden: Path = typer.Option(None, "--golden", help="Built golden-set folder (or authoring file) to check."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus to check the golden set's pins against."),
    config: list[Path] = typer.Option(None, "--config", help="Pipeline config to check (repeatable)."),
    policy: Path = typer.Option(None, "--policy", help="Gate policy to check (raw thresholds, sample size)."),
    judge: Path = typer.Option(None, "--judge", help="Judge config to check against the --config generators "
                                                      "(same model family: self-preference)."),
    tiers: Path = typer.Option(None, "--tiers", help="Tier file written by `golden status --tiers-out`: is a "
                                                     "stratum the stored runs saturate still in the regression "
                                                     "tier? Needs the built --golden set."),
    sigma_d: float = typer.Option(0.25, "--sigma-d",
                                  help="SD of per-query differences for the sample-size check (the middle of the "
                                       "values docs/stats.md works through; measure yours with compare's σ_d); a "
                                       "finite number > 0."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check the environment and the project for the anti-patterns listed in docs/importers.md: labels tied to
    chunk ids, no negative queries, n too small for the policy's minimum effect (counting for each metric the
    queries it is defined on), single-trial runs of a stochastic pipeline, a reranker offered no more
    candidates than it keeps, a gate on raw thresholds, unvalidated judges, judge metrics with few verdicts, a
    judge of the generator's model family, a golden set stale against its corpus, no stated hit rule, runs of a
    purely synthetic golden set, golden labels with no agreement record, a saturated stratum still in the
    regression tier of --tiers.

    Every line is PASS / WARN / FAIL with the docs page that explains it and the fix. Exit code 0 when nothing
    FAILs (PASS or WARN), 1 on a FAIL, 2 on bad input — like gate."""
    refuse(number("--sigma-d", sigma_d, 0, low_open=True, why="measure it with compare's σ_d column, e.g. 0.25"))
    if judge is not None and not config:
        raise InputError("--judge is checked against the generators of the --config files; pass the pipeline "
                         "configs it judges with --config")
    if tiers is not None and golden is None:
        raise InputError("--tiers is read against the built golden set it was written for; pass it with --golden")
    checks = environment_checks(Path.cwd()) + store_checks(store)
    queries = manifest = None
    if golden is not None:
        found, manifest = golden_checks(golden, corpus)
        checks += found
        queries = _raw_queries(golden)
    checks += synthetic_checks(store, manifest)
    if tiers is not None:
        checks += tier_checks(tiers, golden, store)
    if policy is not None:
        checks += policy_checks(policy, queries, sigma_d)
    if config:
        checks += config_checks(config, store)
    if judge is not None:
        checks += judge_config_checks(judge, config)
    verdict = "FAIL" if any(c.verdict == "FAIL" for c in checks) else "WARN" if any(
        c.verdict == "WARN" for c in checks) else "PASS"
    if json_out:
        print_json({"verdict": verdict, "checks": [asdict(c) for c in checks]})
    else:
        colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
        for c in checks:
            line = Text(f"{c.verdict:4}", style=colour[c.verdict]) + Text(f" {c.area}: {c.detail}")
            if c.fix:
                line += Text(f" — fix: {c.fix}", style="dim")
            console.print(line, soft_wrap=True)  # one finding per line, whatever the width
        console.print(Text("doctor ") + Text(verdict, style=f"bold {colour[verdict]}"))
    if verdict == "FAIL":
        raise typer.Exit(EXIT_FAIL)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
