"""`ragassay sweep`: a grid of pipeline configurations, each stored as a run, compared at a fixed token budget.

A sweep file names a base pipeline config, a list of configs (each a name and the sections it overrides, or a
``grid`` of chunker kind x size x overlap), the baseline among them, a token budget and a fixed k. Every
config runs through the ordinary runner (:func:`~ragassay.analysis.runner.run_pipeline_into_store`) with
``reranker.final_k`` raised to ``fusion.depth`` and ``packer.budget_tokens`` set to the budget, so the packer
— not a k cap — decides how many units reach the context (spec §5.1: fix the budget, let k float).

Two tables come out (spec §5, Lab 2):

* the paired comparison of each config against the baseline (:func:`~ragassay.analysis.compare.compare_runs`
  on the stored span metrics, plus paired bootstrap on token recall / precision / IoU at the budget), with
  Benjamini-Hochberg control across the whole sweep: every (config, metric) row is one hypothesis;
* the cost/quality table: per config, the chunking report card (chunks, sizes, chunks and tokens per answer
  span, split spans, build time), k and tokens actually used, and the token metrics at the budget and at
  fixed k with per-query SDs. Token metrics cover the queries with relevant evidence (grade >= the golden
  set's relevance threshold); negatives have no answer tokens to recall.
"""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from ragassay.errors import InputError, SchemaError

TOKEN_METRICS = ("token_recall", "token_precision", "token_iou")
SPAN_METRICS = ("recall@context", "ndcg@final_k", "answer_f1")


def bundled_sweep(name: str = "lab2") -> Path:
    return Path(str(resources.files("ragassay") / "data" / "sweeps" / f"{name}.yaml"))


def _bundled_config(name: str) -> Path:
    return Path(str(resources.files("ragassay") / "data" / "configs" / f"{name}.yaml"))


@dataclass
class SweepSpec:
    name: str
    base: Path
    baseline: str
    budget_tokens: int
    fixed_k: int
    configs: list[tuple[str, dict]]
    source: str = "<sweep>"


GRID_AXES = ("kind", "size", "overlap")


def _axis(where: str, grid: dict, key: str, default: list | None, ok, entry: str) -> list:
    values = grid.get(key, default)
    if not isinstance(values, list) or not values:
        raise SchemaError(f"{where}: grid.{key} must be a non-empty list, each entry {entry}; got {values!r}")
    bad = [v for v in values if not ok(v)]
    if bad:
        raise SchemaError(f"{where}: grid.{key} holds {', '.join(map(repr, bad))}; each entry must be {entry}")
    return values


def _grid(where: str, grid: dict) -> list[tuple[str, dict]]:
    """The configs of a grid: kind x size x overlap. Every entry is checked (a size of 0 or below is refused,
    not dropped); an overlap above 0 applies to fixed windows only, so other kinds take the overlap-0 entry,
    and a fixed window's overlap must be smaller than its size."""
    unknown = sorted(str(k) for k in grid if k not in GRID_AXES)
    if unknown:
        raise SchemaError(f"{where}: unknown grid key(s) {', '.join(unknown)}; a grid has "
                          f"{', '.join(GRID_AXES)}")

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    kinds = _axis(where, grid, "kind", ["recursive"], lambda v: isinstance(v, str) and v, "a chunker kind")
    sizes = _axis(where, grid, "size", None, lambda v: is_int(v) and v >= 1, "a token count >= 1")
    overlaps = _axis(where, grid, "overlap", [0], lambda v: is_int(v) and v >= 0, "a token count >= 0")
    windowless = sorted({k for k in kinds if k != "fixed"})
    if windowless and 0 not in overlaps:
        raise SchemaError(f"{where}: grid.overlap {overlaps} has no 0, the only overlap kind(s) "
                          f"{', '.join(windowless)} take (an overlap applies to fixed windows only), so they would "
                          f"make no config; add 0 to grid.overlap, or drop those kinds")
    out = []
    for kind, size, ov in itertools.product(kinds, sizes, overlaps):
        if ov and kind != "fixed":
            continue  # overlap applies to fixed windows only (the pipeline config refuses it elsewhere)
        if ov >= size:
            raise SchemaError(f"{where}: grid entry fixed-{size}-o{ov}: the overlap ({ov}) must be smaller than "
                              f"the size ({size}); drop that overlap or size from the grid, or list the configs "
                              f"you want under configs:")
        out.append((f"{kind}-{size}" + (f"-o{ov}" if ov else ""), {"chunker": {"kind": kind, "size": size,
                                                                              "overlap": ov}}))
    return out


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; every problem names the file and the key."""
    from ragassay.yamlio import load_yaml_node

    path = Path(path)
    data, _ = load_yaml_node(path, "sweep")
    where = str(path)
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: a sweep is a mapping with base, baseline, budget_tokens and configs or grid")
    unknown = sorted(str(k) for k in data
                     if k not in {"name", "base", "baseline", "budget_tokens", "fixed_k", "configs", "grid"})
    if unknown:
        raise SchemaError(f"{where}: unknown key(s) {', '.join(unknown)}; see docs/stages.md")
    base = data.get("base", "bm25")
    if not isinstance(base, str):
        raise SchemaError(f"{where}: base must be a bundled config name or a path")
    base_path = _bundled_config(base) if _bundled_config(base).is_file() else (path.parent / base)
    if not base_path.is_file():
        raise SchemaError(f"{where}: base {base!r} is neither a bundled config (bm25, hybrid, hybrid_rerank, "
                          f"oracle) nor a file next to the sweep")
    if not isinstance(data.get("configs") or [], list):
        raise SchemaError(f"{where}: configs must be a list of {{name, sections to override}} entries")
    configs: list[tuple[str, dict]] = []
    for i, c in enumerate(data.get("configs") or []):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise SchemaError(f"{where}: configs[{i}] needs a name and the sections it overrides")
        if not _file_name(c["name"]):
            raise SchemaError(f"{where}: configs[{i}] name {c['name']!r} must be a plain file name (no path "
                              f"separator, not . or ..): the config and its traces are written under it")
        configs.append((c["name"], {k: v for k, v in c.items() if k != "name"}))
    if "grid" in data:
        if not isinstance(data["grid"], dict) or not data["grid"]:
            raise SchemaError(f"{where}: grid must be a mapping with a non-empty size list (and kind and overlap "
                              f"lists), e.g. grid: {{kind: [fixed], size: [128, 256]}}, got {data['grid']!r}; or "
                              f"leave grid out")
        configs += _grid(where, data["grid"])
    if len(configs) < 2:
        raise SchemaError(f"{where}: a sweep needs at least two configs (configs: or grid:)")
    names = [n for n, _ in configs]
    if len(set(names)) != len(names):
        raise SchemaError(f"{where}: config names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    baseline = data.get("baseline", names[0])
    if baseline not in names:
        raise SchemaError(f"{where}: baseline {baseline!r} is not one of the configs ({', '.join(names)})")
    budget, k = data.get("budget_tokens", 1000), data.get("fixed_k", 5)
    for key, v in (("budget_tokens", budget), ("fixed_k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SchemaError(f"{where}: {key} must be a positive integer, got {v!r}")
    spec = SweepSpec(str(data.get("name") or path.stem), base_path, baseline, budget, k, configs, where)
    check_configs(spec)
    return spec


def _file_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def check_configs(spec: SweepSpec) -> None:
    """Validate every config the sweep would run (base + overrides); the first bad one is refused, naming it."""
    from ragassay.pipeline.config import parse_config

    for name, over in spec.configs:
        parse_config(config_for(spec, name, over), f"{spec.source}: config {name}")


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def config_for(spec: SweepSpec, name: str, over: dict) -> dict:
    """The pipeline config a sweep runs for one entry: base + overrides, final_k = fusion depth, the budget."""
    from ragassay.yamlio import load_yaml

    base = load_yaml(spec.base, "pipeline config") or {}
    if not isinstance(base, dict):
        raise SchemaError(f"{spec.base}: the sweep's base must be a pipeline config (a mapping of sections)")
    cfg = _merge(base, over)
    cfg["name"] = name
    for section in ("fusion", "reranker", "packer"):  # the sections read or set here: mappings, or left out
        if cfg.get(section) is not None and not isinstance(cfg[section], dict):
            raise SchemaError(f"{spec.source}: config {name}: {section} must be a mapping of settings, got "
                              f"{cfg[section]!r}")
    depth = (cfg.get("fusion") or {}).get("depth", 50)
    cfg["reranker"] = {**(cfg.get("reranker") or {}), "final_k": depth}
    cfg["packer"] = {**(cfg.get("packer") or {}), "budget_tokens": spec.budget_tokens}
    return cfg


@dataclass
class SweepResult:
    spec: SweepSpec
    run_ids: dict[str, str]
    cost_quality: list[dict]
    comparison: list[dict]
    excluded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        s = self.spec
        return {"name": s.name, "base": str(s.base), "baseline": s.baseline, "budget_tokens": s.budget_tokens,
                "fixed_k": s.fixed_k, "run_ids": self.run_ids, "cost_quality": self.cost_quality,
                "comparison": self.comparison, "multiplicity": "Benjamini-Hochberg across every row"}


def _evidence(golden, space, threshold: int):
    qids = [q.query_id for q in golden]
    rows = [(i, e.doc_id, e.start, e.end) for i, q in enumerate(golden) for e in q.evidence if e.grade >= threshold]
    q = np.asarray([r[0] for r in rows], dtype=np.int64)
    lo, hi = space.intervals([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    return qids, q, lo, hi


def _units(traces, index, space, pick):
    q, docs, s, e = [], [], [], []
    for t in traces:
        if t.trial != 0 or t.query_id not in index:
            continue
        for u in pick(t):
            q.append(index[t.query_id])
            docs.append(u.doc_id)
            s.append(u.start)
            e.append(u.end)
    lo, hi = space.intervals(docs, s, e)
    return np.asarray(q, dtype=np.int64), lo, hi


def _sd(x: np.ndarray) -> float:
    ok = x[~np.isnan(x)]
    return float(np.std(ok, ddof=1)) if len(ok) > 1 else float("nan")


def _mean(x: np.ndarray) -> float:
    ok = x[~np.isnan(x)]
    return float(ok.mean()) if len(ok) else float("nan")


def measure_config(traces, golden, corpus, space, chunker: dict, budget: int, fixed_k: int,
                   threshold: int) -> tuple[dict, dict[str, np.ndarray]]:
    """Cost/quality row of one config and its per-query token metrics at the budget."""
    from ragassay.metrics.tokens import precision_omega, report_card, token_metrics
    from ragassay.pipeline.chunkers import chunk_corpus

    qids, eq, elo, ehi = _evidence(golden, space, threshold)
    index = {q: i for i, q in enumerate(qids)}
    n = len(qids)
    answerable = np.bincount(eq, minlength=n)[:n] > 0
    t0 = time.perf_counter()
    chunks = chunk_corpus({d.doc_id: d.text for d in corpus}, chunker.get("kind", "recursive"),
                          chunker.get("size", 128), chunker.get("overlap", 0))
    chunk_ms = (time.perf_counter() - t0) * 1e3
    clo, chi = space.intervals([c.doc_id for c in chunks], [c.start for c in chunks], [c.end for c in chunks])
    omega = precision_omega(n, clo, chi, eq, elo, ehi)
    card = report_card(clo, chi, elo, ehi, build_ms=chunk_ms, omega=omega[answerable])
    traces = list(traces)
    at_budget = token_metrics(n, eq, elo, ehi, *_units(traces, index, space, lambda t: t.packed))
    at_k = token_metrics(n, eq, elo, ehi,
                         *_units(traces, index, space, lambda t: (t.reranked or t.fused)[:fixed_k]))
    k_used = np.asarray([len(t.packed) for t in traces if t.trial == 0], dtype=float)
    used = np.asarray([t.packed_tokens for t in traces if t.trial == 0], dtype=float)
    k_fixed = np.asarray([min(fixed_k, len(t.reranked or t.fused)) for t in traces if t.trial == 0], dtype=float)
    row = {"card": card.to_dict(), "k_used_mean": _mean(k_used), "tokens_used_mean": _mean(used),
           f"k_used_mean@k{fixed_k}": _mean(k_fixed),
           f"tokens_used_mean@k{fixed_k}": _mean(np.where(answerable, at_k.retrieved_tokens, np.nan)),
           "n_queries": int(answerable.sum())}
    per_query = {}
    for tag, m in (("budget", at_budget), (f"k{fixed_k}", at_k)):
        for name, arr in (("token_recall", m.recall), ("token_precision", m.precision), ("token_iou", m.iou)):
            a = np.where(answerable, arr, np.nan)
            row[f"{name}@{tag}"] = {"mean": _mean(a), "sd": _sd(a)}
            if tag == "budget":
                per_query[name] = a
    row["precision_omega"] = {"mean": _mean(omega[answerable]), "sd": _sd(omega[answerable])}
    return row, per_query


def run_sweep(store, spec: SweepSpec, corpus, golden, workdir: str | Path, *, n_resamples: int = 2000,
              seed: int = 0, confidence: float = 0.95, progress=None) -> SweepResult:
    """Run, store and measure every config of ``spec``; compare each with the baseline. Every config and
    setting is checked before ``workdir`` (new or empty) is created or anything runs."""
    import yaml

    from ragassay.analysis.compare import compare_runs, compare_wide
    from ragassay.analysis.runner import run_pipeline_into_store
    from ragassay.fsio import check_output_dir, make_dir
    from ragassay.metrics.tokens import TokenSpace
    from ragassay.stats import adjust_pvalues
    from ragassay.trace import TraceReader

    ok = isinstance(n_resamples, int) and not isinstance(n_resamples, bool) and 100 <= n_resamples <= 1_000_000
    if not ok:
        raise InputError(f"n_resamples={n_resamples!r}: give an integer between 100 and 1,000,000")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed={seed!r}: give an integer >= 0")
    if not isinstance(confidence, float | int) or not 0 < confidence < 1:
        raise InputError(f"confidence={confidence!r}: give a number strictly between 0 and 1")
    check_configs(spec)
    workdir = Path(workdir)
    check_output_dir(workdir, "sweep")
    make_dir(workdir)
    space = TokenSpace.from_corpus(corpus)
    threshold = int(golden.manifest.get("relevance_threshold", 2))
    run_ids: dict[str, str] = {}
    rows: list[dict] = []
    per_query: dict[str, dict[str, np.ndarray]] = {}
    for i, (name, over) in enumerate(spec.configs):
        cfg = config_for(spec, name, over)
        cfg_path = workdir / f"{name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        tdir = workdir / f"{name}-traces"
        t0 = time.perf_counter()
        run_id, _ = run_pipeline_into_store(store, cfg_path, corpus, golden, name=f"{spec.name}/{name}",
                                            traces_dir=tdir, batched=True)
        run_ms = (time.perf_counter() - t0) * 1e3
        run_ids[name] = run_id
        traces = list(TraceReader(tdir / f"{run_id}.jsonl"))
        row, pq = measure_config(traces, golden, corpus, space, cfg["chunker"], spec.budget_tokens, spec.fixed_k,
                                 threshold)
        rec = store.get_run(run_id)
        row = {"config": name, "run_id": run_id, "run_ms": run_ms,
               "index_build_ms": sum((rec.extra or {}).get("build_ms", {}).values()), **row}
        for m in SPAN_METRICS:
            vals = store.results(run_id, metrics=[m])["value"].to_numpy(zero_copy_only=False).astype(float)
            row[m] = {"mean": _mean(vals), "sd": _sd(vals)}
        rows.append(row)
        per_query[name] = pq
        if progress:
            progress(i + 1, len(spec.configs), name)
    qids = [(q.query_id, 0) for q in golden]
    strata = [q.stratum for q in golden]
    comparison: list[dict] = []
    base_id = run_ids[spec.baseline]
    for name, _ in spec.configs:
        if name == spec.baseline:
            continue
        comp = compare_runs(store, base_id, run_ids[name], metrics=list(SPAN_METRICS), n_resamples=n_resamples,
                            seed=seed, confidence=confidence, strata=False)
        rws = [r for r in comp.rows if r.stratum == "all"]
        a = np.column_stack([per_query[spec.baseline][m] for m in TOKEN_METRICS])
        b = np.column_stack([per_query[name][m] for m in TOKEN_METRICS])
        rws += [r for r in compare_wide(qids, strata, a, qids, b, list(TOKEN_METRICS), n_resamples=n_resamples,
                                        seed=seed, confidence=confidence, strata=False) if r.stratum == "all"]
        comparison += [{"config": name, **r.to_dict()} for r in rws]
    adj = adjust_pvalues(np.asarray([r["p"] if r["p"] is not None else np.nan for r in comparison]), "bh")
    alpha = 1 - confidence
    for r, p in zip(comparison, adj, strict=True):
        r["p_adj_sweep"] = None if p != p else float(p)
        lo, hi = r["ci_low"], r["ci_high"]
        credible = lo is not None and hi is not None and (lo > 0 or hi < 0) and p == p and p < alpha
        better = (r["delta"] > 0) == r["higher_is_better"] if r["delta"] is not None else False
        r["sweep_verdict"] = ("better" if better else "worse") if credible else "no credible change"
    return SweepResult(spec, run_ids, rows, comparison)


def stages_report_section(sweep: dict | None = None, survival: list[dict] | None = None,
                          corpus_check: dict | None = None, chunk_cards: list[dict] | None = None) -> dict:
    """Data for the report's "stages before retrieval" section, JSON-serializable: the ``to_dict()`` of a
    :class:`SweepResult`, of one :class:`~ragassay.corpus.survival.Survival` per parser, of a
    :class:`~ragassay.corpus.check.CorpusCheck`, and chunking report cards; absent parts are None."""
    out: dict = {"kind": "stages", "sweep": None, "survival": None, "corpus_check": corpus_check,
                 "chunk_cards": chunk_cards}
    if sweep is not None:
        out["sweep"] = {"name": sweep["name"], "baseline": sweep["baseline"], "budget_tokens": sweep["budget_tokens"],
                        "fixed_k": sweep["fixed_k"], "cost_quality": sweep["cost_quality"],
                        "comparison": sweep["comparison"]}
    if survival is not None:
        out["survival"] = [{"parser": s["parser"], "by_stratum": s["by_stratum"], "by_format": s["by_format"],
                            "n_lost": sum(r["n_lost"] for r in s["by_stratum"] if r["group"] != "all")}
                           for s in survival]
    return out

