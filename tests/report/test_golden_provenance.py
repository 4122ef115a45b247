"""The report's golden-set provenance section: sources and the synthetic share, annotators and kappa with where
the kappa came from, each run's judged fraction and saturation per stratum. Every figure on the page is checked
against a computation made here from the inputs (scikit-learn, scipy, numpy), and every text is escaped."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from report_fixtures import PAYLOADS, PWN_SCRIPT
from scipy import stats as sps
from sklearn.metrics import cohen_kappa_score

from ragassay.analysis.report_data import build_report_data
from ragassay.corpus import load_corpus
from ragassay.golden import GoldenSet, build_golden
from ragassay.report import render_report
from ragassay.store import RunRecord, Store

# stratum -> (number of items, answerable)
STRATA = {"alpha": (50, True), "beta": (6, True), "gamma": (1, True), "negative": (2, False)}


class _Tables(HTMLParser):
    """The text of every cell of the tables with an id, and of elements with an id, from a page."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.text: dict[str, str] = {}
        self._table = None
        self._cell = None
        self._ids: list[tuple[str, int]] = []
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._depth += 1
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        if a.get("id") and tag != "table":
            self._ids.append((a["id"], self._depth))
            self.text[a["id"]] = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None
        if self._ids and self._ids[-1][1] == self._depth:
            self._ids.pop()
        self._depth -= 1

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for i, _ in self._ids:
            self.text[i] += data


def _parse(page: str) -> _Tables:
    p = _Tables()
    p.feed(page)
    return p


def _golden(tmp_path, meta: dict, sources: dict[str, str] | None = None, agreement=()):
    """A corpus of one document and a golden set over STRATA; ``sources`` maps query id -> source."""
    n = sum(k for k, _ in STRATA.values())
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "doc.txt").write_text(" ".join(f"Sentence {i} names item{i:03d}x." for i in range(n)))
    corpus = load_corpus(corpus_dir)
    src = tmp_path / "golden.jsonl"
    lines = [json.dumps({"type": "meta", "dataset": "prov", **meta})]
    i = 0
    for stratum, (k, answerable) in STRATA.items():
        for _ in range(k):
            q = {"query_id": f"q{i:02d}", "question": f"What names item {i}?", "stratum": stratum,
                 "source": (sources or {}).get(f"q{i:02d}", "human")}
            if answerable:
                q["evidence"] = [{"doc_id": "doc", "quote": f"item{i:03d}x", "grade": 3}]
            else:
                q["answerable"] = False
            lines.append(json.dumps(q))
            i += 1
    src.write_text("\n".join(lines) + "\n")
    return corpus, build_golden(src, corpus, agreement=agreement)


def _scores(golden, seed: int, trials: int = 1) -> dict:
    """recall@10 per (query, trial) by stratum: alpha high and tight (saturated), beta spread out, gamma one
    item, negative undefined; and a judged fraction per (query, trial) with some undefined."""
    rng = np.random.default_rng(seed)
    rows = {}
    for q in golden.queries:
        for t in range(trials):
            if q.stratum == "alpha":
                v = float(rng.uniform(0.97, 1.0))
            elif q.stratum == "beta":
                v = float(rng.uniform(0.0, 1.0))
            elif q.stratum == "gamma":
                v = 1.0
            else:
                v = float("nan")
            jf = float("nan") if rng.random() < 0.2 else float(rng.choice([0.0, 0.2, 0.4, 0.6, 1.0]))
            rows[(q.query_id, t)] = (v, jf)
    return rows


def _store(tmp_path, golden, corpus, runs: list[tuple[str, dict, bool]]):
    """A store holding ``runs`` (name, scores from :func:`_scores`, has recall@10), created in this order."""
    st = Store.open(tmp_path / "store.duckdb")
    ids = []
    strata = {q.query_id: q.stratum for q in golden.queries}
    for name, scores, has_recall in runs:
        rid = st.create_run(RunRecord(
            name=name, dataset_version=golden.dataset_version, corpus_digest=corpus.digest, metric_version="t",
            config={"name": name, "reranker": {"final_k": 5}}, hit_rule="any_overlap", relevance_threshold=2,
            gain="exponential", ties="trec", trials=1))
        keys = sorted(scores)
        metric = "recall@10" if has_recall else "answer_f1"
        st.write_batch(rid, {
            "query_id": [q for q, _ in keys], "trial": [t for _, t in keys], "metric": [metric] * len(keys),
            "value": [scores[k][0] if has_recall else 0.5 for k in keys],
            "stratum": [strata[q] for q, _ in keys], "judged_fraction": [scores[k][1] for k in keys],
            "latency_ms": [10.0] * len(keys)})
        st.finish_run(rid)
        ids.append(rid)
    return st, ids


def _page(tmp_path, st, ids, golden, corpus) -> tuple[dict, str]:
    data = build_report_data(st, ids, golden, corpus, analyses=False, title="provenance")
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    return data, page


@pytest.fixture
def built(tmp_path):
    corpus, golden = _golden(tmp_path, {"annotators": ["ann"]})
    runs = [("first", _scores(golden, 1, trials=2), True), ("second", _scores(golden, 2), True),
            ("answers-only", _scores(golden, 3), False)]
    st, ids = _store(tmp_path, golden, corpus, runs)
    data, page = _page(tmp_path, st, ids, golden, corpus)
    yield golden, runs, data, page
    st.close()


def test_saturation_per_stratum_matches_a_t_interval_computed_here(built):
    golden, runs, data, page = built
    items = {s: [q.query_id for q in golden.queries if q.stratum == s] for s in STRATA}
    expect = {}
    for s, qids in items.items():
        means = []
        for name, scores, has_recall in runs:
            if not has_recall:
                continue
            per_item = np.array([np.nanmean([v for (q, _), (v, _) in scores.items() if q == qid])
                                 if any(not np.isnan(v) for (q, _), (v, _) in scores.items() if q == qid)
                                 else np.nan for qid in qids])
            v = per_item[~np.isnan(per_item)]
            mean = v.mean() if v.size else np.nan
            # the t interval's lower end, capped by the exact bound when all n succeed, scaled by the mean
            low = (min(sps.t.interval(0.95, v.size - 1, loc=mean, scale=sps.sem(v))[0], mean * 0.025 ** (1 / v.size))
                   if v.size > 1 else np.nan)
            means.append((name, mean, low))
        defined = [m for m in means if not np.isnan(m[1])]
        if any((not np.isnan(m) and m < 0.95) or (not np.isnan(lo) and lo < 0.90) for _, m, lo in means):
            sat = "no"
        elif any(np.isnan(lo) for _, _, lo in means):
            sat = "undefined"
        else:
            sat = "yes"
        best = max(defined, key=lambda m: m[1]) if defined else None
        expect[s] = (best, means[-1][1], sat)
    assert [e[2] for e in expect.values()] == ["yes", "no", "undefined", "undefined"]  # the data covers each case
    rows = {r[0]: r for r in _parse(page).tables["provenance-saturation"][1:]}
    assert set(rows) == set(STRATA)
    for s, (best, latest, sat) in expect.items():
        stratum, n, best_txt, best_run, latest_txt, headroom, sat_txt, _, n_undef = rows[s]
        assert int(n) == len(items[s]) and sat_txt == sat
        if best is None:
            assert (best_txt, best_run, latest_txt, headroom) == ("undefined", "—", "undefined", "undefined")
            assert int(n_undef) == len(items[s])
        else:
            assert (best_txt, best_run) == (f"{best[1]:.3f}", best[0])
            assert headroom == f"{1 - best[1]:.3f}" and latest_txt == f"{latest:.3f}"
    sec = data["golden_provenance"]["saturation"]
    assert sec["metric"] == "recall@10" and sec["configs"] == ["first", "second"]
    assert sec["excluded"] == [{"run": "answers-only", "reason": "has no recall@10 rows"}]
    assert "answers-only" in _parse(page).text["provenance"] and "has no recall@10 rows" in page


def test_judged_fraction_is_each_runs_mean_over_query_trials_with_undefined_counted(built):
    _, runs, data, page = built
    got = {j["run"]: j for j in data["golden_provenance"]["judged"]}
    table = {r[0]: r for r in _parse(page).tables["provenance-judged"][1:]}
    for name, scores, _ in runs:
        jf = np.array([j for _, j in scores.values()])
        defined = jf[~np.isnan(jf)]
        assert got[name]["mean"] == pytest.approx(defined.mean(), abs=1e-12)
        assert (got[name]["n"], got[name]["n_undefined"]) == (defined.size, np.isnan(jf).sum())
        # k is final_k as the run's metric names pin it; these runs have no @final_k metric, so it is unknown
        assert got[name]["k"] is None
        assert table[name][1:] == ["—", f"{defined.mean():.3f} ({np.isnan(jf).sum()} undefined)"]


def test_sources_table_and_the_share_of_synthetic_items(tmp_path):
    sources = {f"q{i:02d}": "synthetic" for i in (0, 3, 7)} | {"q01": "production"}
    corpus, golden = _golden(tmp_path, {}, sources)
    st, ids = _store(tmp_path, golden, corpus, [("only", _scores(golden, 4), True)])
    with st:
        data, page = _page(tmp_path, st, ids, golden, corpus)
    n = len(golden.queries)
    counts = {s: sum(q.source == s for q in golden.queries) for s in ("human", "production", "synthetic")}
    assert counts == {"human": n - 4, "production": 1, "synthetic": 3}
    p = _parse(page)
    rows = {r[0]: r[1:] for r in p.tables["provenance-sources"][1:]}
    assert rows == {s: [str(c), f"{c / n:.0%}"] for s, c in counts.items()}
    assert p.text["provenance-synthetic-share"] == f"{3 / n:.0%}"
    note = p.text["provenance-synthetic"]
    assert note == f"golden set: 3 of {n} items synthetic ({3 / n:.0%}); the absolute means lean on them"
    assert 'class="callout warn" id="provenance-synthetic"' not in page  # a mixed set is not all synthetic


def test_a_purely_synthetic_set_gets_the_read_the_deltas_callout(tmp_path):
    n = sum(k for k, _ in STRATA.values())
    corpus, golden = _golden(tmp_path, {}, {f"q{i:02d}": "synthetic" for i in range(n)})
    st, ids = _store(tmp_path, golden, corpus, [("only", _scores(golden, 4), True)])
    with st:
        _, page = _page(tmp_path, st, ids, golden, corpus)
    assert 'class="callout warn" id="provenance-synthetic"' in page
    note = _parse(page).text["provenance-synthetic"]
    assert note.startswith(f"golden set: all {n} items synthetic — read the deltas, not the absolute means")
    assert _parse(page).text["provenance-synthetic-share"] == "100%"


def test_computed_kappa_is_shown_with_its_source_and_label_files(tmp_path):
    rng = np.random.default_rng(6)
    a = rng.integers(0, 4, 40)
    b = np.where(rng.random(40) < 0.7, a, rng.integers(0, 4, 40))
    paths = []
    for name, grades in (("ann-a", a), ("ann-b", b)):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"query_id": f"q{i % 13:02d}", "unit_id": f"u{i}", "grade": int(g)}) + "\n"
                             for i, g in enumerate(grades)))
        paths.append(p)
    corpus, golden = _golden(tmp_path, {"kappa_binary": 0.99}, agreement=paths)
    st, ids = _store(tmp_path, golden, corpus, [("only", _scores(golden, 4), True)])
    with st:
        _, page = _page(tmp_path, st, ids, golden, corpus)
    p = _parse(page)
    kv = {r[0]: r[1] for r in p.tables["provenance-agreement"]}
    assert kv["kappa_binary"] == f"{cohen_kappa_score(a >= 2, b >= 2):.3f}"
    assert kv["kappa_graded"] == f"{cohen_kappa_score(a, b, labels=[0, 1, 2, 3], weights='linear'):.3f}"
    assert kv["annotators"] == "ann-a, ann-b" and kv["kappa source"] == "computed by golden agree"
    computed = p.tables["provenance-computed"]
    assert [r[0] for r in computed[:4]] == ["kappa_binary", "kappa_graded", "alpha_ordinal", "alpha_nominal"]
    assert computed[0][1].startswith(f"{cohen_kappa_score(a >= 2, b >= 2):.3f} [")
    assert [r[1] for r in computed[4:]] == [f"{q.name} ({q.stem}) sha256 {hashlib.sha256(q.read_bytes()).hexdigest()}"
                                            for q in paths]
    assert "typed into the authoring file" not in page


def test_declared_kappa_is_marked_as_declared_and_an_old_manifest_counts_as_declared(tmp_path):
    corpus, golden = _golden(tmp_path, {"annotators": ["x", "y"], "kappa_binary": 0.81})
    st, ids = _store(tmp_path, golden, corpus, [("only", _scores(golden, 4), True)])
    with st:
        _, page = _page(tmp_path, st, ids, golden, corpus)
        kv = {r[0]: r[1] for r in _parse(page).tables["provenance-agreement"]}
        assert (kv["kappa_binary"], kv["kappa_graded"]) == ("0.810", "not recorded")
        assert kv["kappa source"] == "declared in the authoring file" and "typed into the authoring file" in page
        # a manifest built before kappa_source existed copied its kappa from the authoring file
        old = GoldenSet(golden.queries, {k: v for k, v in golden.manifest.items() if k != "kappa_source"})
        data = build_report_data(st, ids, old, corpus, analyses=False, title="old")
        assert data["golden_provenance"]["agreement"]["kappa_source"] == "declared"
        bare = GoldenSet(golden.queries, {k: v for k, v in golden.manifest.items()
                                          if k not in ("kappa_source", "kappa_binary")})
        data = build_report_data(st, ids, bare, corpus, analyses=False, title="bare")
        assert data["golden_provenance"]["agreement"]["kappa_source"] is None


def test_provenance_texts_are_escaped(tmp_path):
    hostile = [f"{p} {PWN_SCRIPT}" for p in PAYLOADS]
    corpus, golden = _golden(tmp_path, {"annotators": hostile})
    name = f"run {PWN_SCRIPT}"
    st, ids = _store(tmp_path, golden, corpus, [(name, _scores(golden, 4), True),
                                                (f"no recall {PWN_SCRIPT}", _scores(golden, 5), False)])
    with st:
        _, page = _page(tmp_path, st, ids, golden, corpus)
    section = page[page.index('<section id="provenance">'):page.index('<section id="manifest">')]
    assert "<script>" not in section and "<img" not in section and "<svg" not in section
    assert section.count("&lt;script&gt;document.title=") >= len(hostile) + 3
    p = _parse(page)
    kv = {r[0]: r[1] for r in p.tables["provenance-agreement"]}
    assert kv["annotators"] == ", ".join(" ".join(h.split()) for h in hostile)
    assert p.tables["provenance-judged"][1][0] == " ".join(name.split())
    assert re.search(r'<a href="#provenance">Golden provenance</a>', page)


def test_saturation_falls_back_to_answer_f1_and_names_unfinished_runs(tmp_path):
    corpus, golden = _golden(tmp_path, {})
    st, ids = _store(tmp_path, golden, corpus, [("a", _scores(golden, 1), False), ("b", _scores(golden, 2), False)])
    with st:
        rid = st.create_run(RunRecord(name="half", dataset_version=golden.dataset_version, corpus_digest=corpus.digest,
                                      config={"name": "half"}))
        st.write_batch(rid, {"query_id": ["q00"], "metric": ["answer_f1"], "value": [1.0], "stratum": ["alpha"]})
        data = build_report_data(st, [*ids, rid], golden, corpus, analyses=False, title="fallback")
    sat = data["golden_provenance"]["saturation"]
    assert sat["metric"] == "answer_f1" and sat["configs"] == ["a", "b"]
    assert sat["excluded"] == [{"run": "half", "reason": "running, not complete"}]
    # every answer_f1 value is 0.5: no stratum reaches 0.95
    assert {r["stratum"]: (r["best"], r["saturated"]) for r in sat["strata"]} == {
        "alpha": (0.5, False), "beta": (0.5, False), "gamma": (0.5, False), "negative": (0.5, False)}


def test_an_undefined_computed_kappa_reads_undefined_and_bad_data_names_its_key():
    from ragassay.errors import SchemaError
    from ragassay.report.html import build_context

    prov = {"sources": {"n": 2, "source_mix": {"human": 2}, "synthetic_share": 0.0, "note": None},
            "agreement": {"annotators": ["a", "b"], "kappa_binary": None, "kappa_graded": 0.5,
                          "kappa_source": "computed", "computed": None},
            "judged": [], "saturation": None}
    ctx = build_context({"title": "t", "runs": [], "golden_provenance": prov})
    assert ctx["provenance"]["agreement"]["kappas"] == [("kappa_binary", "undefined"), ("kappa_graded", "0.500")]
    bad = {**prov, "agreement": {**prov["agreement"], "kappa_graded": "high"}}
    with pytest.raises(SchemaError, match=r"`golden_provenance.agreement.kappa_graded` must be a number or null"):
        build_context({"title": "t", "runs": [], "golden_provenance": bad})
