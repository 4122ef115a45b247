"""Synthetic report data for the report tests: three runs, 24 queries in four strata, every section filled.

``make_data(hostile=True)`` puts script/markup payloads into every string field a user or a pipeline can
control (question, evidence text, answer, doc_id, run name, config values, stratum, claim, ...).
"""

from __future__ import annotations

import math
from html.parser import HTMLParser

import numpy as np

PAYLOADS = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "</textarea>",
    "{{ 7*7 }}",
)
PWN_SCRIPT = "<script>document.title='PWNED'</script>"
PWN_IMG = "<img src=x onerror=\"document.title='PWNED'\">"
HOSTILE = " ".join(PAYLOADS)

DOC_TEXT = (
    "The notice period for termination is thirty days. Either party may end the agreement in writing. "
    "Fees are payable monthly in advance. Late payment accrues interest at two percent per month. "
    "The licensee may not sublicense the software without prior written consent of the licensor."
)
STRATA = ("exact", "paraphrase", "multi_doc", "negative")
N_QUERIES = 24


def make_data(hostile: bool = False) -> dict:
    rng = np.random.default_rng(7)
    h = (lambda s: f"{s} {HOSTILE}") if hostile else (lambda s: s)
    runs = ["bm25", "dense", h("hybrid")]
    strata = [h(s) if s == "paraphrase" else s for s in STRATA]
    doc = h("contract-01")
    queries = []
    for i in range(N_QUERIES):
        stratum = strata[i % len(strata)]
        answerable = STRATA[i % len(STRATA)] != "negative"
        start, end = (0, 49) if i % 2 == 0 else (99, 136)
        ev_text = DOC_TEXT[start:end]
        evidence = (
            [{"doc_id": doc, "start": start, "end": end, "grade": 3 - i % 3, "text": ev_text}]
            if answerable
            else []
        )
        if hostile and i == 0:
            evidence.append(
                {"doc_id": doc, "start": 0, "end": 10, "grade": 1, "text": PWN_SCRIPT + " " + HOSTILE}
            )
        qruns = {}
        for r, run in enumerate(runs):
            u0 = int(rng.integers(0, 150))
            units = [
                {"rank": 1, "doc_id": doc, "start": start, "end": end, "grade": 2.0, "text": ev_text},
                {
                    "rank": 2,
                    "doc_id": doc,
                    "start": u0,
                    "end": u0 + 60,
                    "grade": 0.0,
                    "text": DOC_TEXT[u0 : u0 + 60],
                },
            ]
            if r == 0 and i % 5 == 0:
                units = units[1:]
            recall = float(np.mean(rng.random(2) < 0.4 + 0.2 * r)) if answerable else math.nan
            qruns[run] = {
                "outcome": "answered" if answerable or (i + r) % 3 else "abstained",
                "answer": h(ev_text) if answerable else None,
                "metrics": {
                    "recall@10": recall,
                    "ndcg@10": None if not answerable else recall * 0.9,
                    "answer_f1": float(rng.random()),
                },
                "retrieved": units,
            }
        if hostile and i == 1:
            qruns[runs[0]]["answer"] = PWN_IMG
        queries.append(
            {
                "query_id": f"q{i:03d}" if not (hostile and i == 2) else "q/002 <b>",
                "stratum": stratum,
                "question": h(f"What does clause {i} say about notice?")
                if i != 3
                else (PWN_SCRIPT if hostile else "What is the late fee?"),
                "answerable": answerable,
                "evidence": evidence,
                "runs": qruns,
                "worst_delta": {
                    "metric": "recall@10",
                    "baseline": runs[0],
                    "candidate": runs[2],
                    "delta": -0.5 if i in (5, 9) else 0.0,
                }
                if i % 2 == 1
                else None,
            }
        )
    rows = []
    for s in ["all", *strata]:
        rows.append(
            {
                "metric": "recall@10",
                "stratum": s,
                "n": 24 if s == "all" else 6,
                "mean_a": 0.61,
                "mean_b": 0.70,
                "delta": 0.07 if s != "multi_doc" else -0.125,
                "ci_low": 0.03 if s == "all" else -0.2,
                "ci_high": 0.11 if s == "all" else (-0.01 if s == "multi_doc" else 0.25),
                "p": 0.0004 if s == "all" else 0.31,
                "p_adj": 0.0021 if s == "all" else 0.62,
                "wins": 9,
                "losses": 3,
                "ties": 12,
                "sigma_d": 0.25,
                "mde": 0.143,
                "verdict": "improved"
                if s == "all"
                else ("regressed" if s == "multi_doc" else h("no credible change")),
            }
        )
    rows.append(
        {
            "metric": "ndcg@10",
            "stratum": "all",
            "n": 24,
            "mean_a": None,
            "mean_b": math.nan,
            "delta": None,
            "ci_low": None,
            "ci_high": None,
            "p": None,
            "p_adj": None,
            "wins": 0,
            "losses": 0,
            "ties": 24,
            "sigma_d": None,
            "mde": None,
            "verdict": "undefined",
        }
    )
    forest_rows = [
        {
            "stratum": r["stratum"],
            "delta": r["delta"],
            "ci_low": r["ci_low"],
            "ci_high": r["ci_high"],
            "n": r["n"],
        }
        for r in rows
        if r["metric"] == "recall@10"
    ]
    forest_rows.append({"stratum": "empty", "delta": None, "ci_low": None, "ci_high": None, "n": 0})
    latency = [
        {"run": run, "values_ms": (rng.lognormal(np.log(40 + 30 * r), 0.5, 200)).tolist()}
        for r, run in enumerate(runs)
    ]
    latency[0]["values_ms"][3] = None
    latency[0]["values_ms"][4] = math.nan
    pins = {
        "dataset_version": "demo-2024.1",
        "corpus_digest": "sha256:ab12cd",
        "config_sha": "c0ffee",
        "metric_version": "m3",
        "hit_rule": "any_overlap",
        "gain": "exponential",
        "relevance_threshold": 1,
        "ties": "trec",
        "git_sha": "deadbeef",
        "trials": 1,
    }
    return {
        "title": h("ragassay report: bm25 vs hybrid"),
        "generated_at": "2024-06-01T12:00:00Z",
        "ragassay_version": "0.1.0",
        "runs": [
            {
                "run_id": f"run-{r}",
                "name": run,
                "pins": {**pins, "config_sha": f"c0ffee{r}"},
                "config": {
                    "retrieval": {"mode": ["bm25", "dense", "hybrid"][r], "fusion": {"depth": 50 + r}},
                    "generator": {"prompt": h("Answer from context only.")},
                    "final_k": 10,
                },
            }
            for r, run in enumerate(runs)
        ],
        "manifest": {
            "dataset_version": "demo-2024.1",
            "n_queries": N_QUERIES,
            "label_type": "span",
            "hit_rule": "any_overlap",
            "strata": {s: 6 for s in strata},
            "annotators": {"kappa": 0.78},
        },
        "stage_table": {
            "runs": runs,
            "rows": [
                {
                    "stage": "retrieve",
                    "metric": "recall@fusion_depth",
                    "values": [0.812, 0.845, 0.9],
                    "n_defined": [18, 18, 18],
                    "n_undefined": [6, 6, 6],
                },
                {
                    "stage": "rerank",
                    "metric": "ndcg@10",
                    "values": [0.5, None, 0.6251],
                    "n_defined": [18, 0, 18],
                    "n_undefined": [6, 24, 6],
                },
                {"stage": "generate", "metric": "answer_f1", "values": [0.4, math.nan, 0.55]},
            ],
        },
        "strata_table": {
            "runs": runs,
            "metric": "recall@10",
            "rows": [
                {"stratum": s, "n": 6, "values": [0.5, 0.6, None if s == "negative" else 0.7]} for s in strata
            ],
        },
        "comparisons": [
            {
                "baseline": runs[0],
                "candidate": runs[2],
                "rows": rows,
                "claims": [
                    h(
                        "recall@10 went from 0.610 to 0.700 (+0.070, 95% paired-bootstrap CI "
                        "[0.030, 0.110], n=24 queries, any_overlap)."
                    )
                ],
                "config_diff": [
                    {"key": "retrieval.mode", "a": "bm25", "b": h("hybrid")},
                    {"key": "retrieval.fusion.depth", "a": 50, "b": 52},
                ],
            }
        ],
        "forest": {
            "metric": "recall@10",
            "comparisons": [{"label": h("hybrid vs bm25"), "rows": forest_rows}],
        },
        "recall_curves": [
            {
                "run": run,
                "k": [1, 2, 5, 10, 20, 50, 100],
                "recall": [0.2 + 0.05 * r, 0.3, 0.45, 0.6 + 0.05 * r, 0.7, None if r == 1 else 0.8, 0.85],
            }
            for r, run in enumerate(runs)
        ],
        "rerank_movement": [
            {"run": run, "final_k": 10, "rescued": 3 + r, "broke": 1, "kept": 12 - r, "missed_both": 8}
            for r, run in enumerate(runs)
        ],
        "abstention": [
            {
                "run": run,
                "abstention_recall": [0.5, None, 0.8333][r],
                "over_refusal": 0.1 * r,
                "abstention_precision": 0.75,
                "n_negative": 6,
                "n_answerable": 18,
                "refused": r,
                "errors": 0,
            }
            for r, run in enumerate(runs)
        ],
        "latency": latency,
        "oracle_ladder": {
            "rows": [
                {
                    "config": "oracle context",
                    "recall@fusion_depth": None,
                    "answer_f1": 0.91,
                    "abstention_recall": 0.95,
                },
                {
                    "config": h("full pipeline"),
                    "recall@fusion_depth": 0.78,
                    "answer_f1": 0.55,
                    "abstention_recall": 0.8,
                },
            ],
            "diagnosis": h(
                "Generation is fine with oracle context; the fault is upstream: recall@fusion_depth is 0.78."
            ),
        },
        "gate": {
            "verdict": "FAIL",
            "baseline": runs[0],
            "candidate": runs[2],
            "checks": [
                {
                    "name": "recall@10",
                    "kind": "statistical",
                    "verdict": "pass",
                    "detail": "+0.070 [0.030, 0.110]",
                },
                {
                    "name": "p95 latency",
                    "kind": "hard",
                    "verdict": "fail",
                    "detail": h("p95 118 ms > SLO 100 ms"),
                },
            ],
        },
        "queries": queries,
        "worst_regressions": [
            queries[5]["query_id"],
            queries[9]["query_id"],
            queries[2]["query_id"],
            "q-missing",
        ],
    }


def make_large_data(n: int, seed: int = 3) -> dict:
    """Two runs over ``n`` queries with evidence, answers and five retrieved units each, for scale tests."""
    rng = np.random.default_rng(seed)
    runs = ["base", "cand"]
    rec = rng.random((len(runs), n))
    rec[:, ::7] = np.nan
    queries = []
    for i in range(n):
        s = int(rng.integers(0, 150))
        ev = {"doc_id": f"doc{i % 300}", "start": s, "end": s + 60, "grade": 2, "text": DOC_TEXT[s:s + 60]}
        qruns = {}
        for r, run in enumerate(runs):
            units = []
            for k in range(5):
                u0 = int(rng.integers(0, 200))
                units.append({"rank": k + 1, "doc_id": f"doc{(i + k) % 300}", "start": u0, "end": u0 + 80,
                              "grade": float(k == 0), "text": DOC_TEXT[u0:u0 + 80]})
            v = float(rec[r, i])
            qruns[run] = {"outcome": "answered", "answer": f"Answer {i} from {run}: thirty days notice.",
                          "metrics": {"recall@10": None if v != v else v, "answer_f1": float(rng.random())},
                          "retrieved": units}
        queries.append({"query_id": f"q{i:06d}", "stratum": STRATA[i % 3], "answerable": True,
                        "question": f"What does clause {i} say about the notice period?", "evidence": [ev],
                        "runs": qruns})
    return {"title": f"scale: {n} queries", "runs": [{"name": r, "run_id": f"run-{r}"} for r in runs],
            "queries": queries}


def start_tags(page: str) -> list[tuple[str, dict]]:
    """Every start tag of an HTML document with its (decoded) attributes, as a browser's tokenizer sees it."""
    tags: list[tuple[str, dict]] = []

    class _P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append((tag, dict(attrs)))

    _P(convert_charrefs=True).feed(page)
    return tags
