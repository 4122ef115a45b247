"""Normalization property checks (spec §4.6), run on a whole corpus with failures listed per document.

* idempotence: ``canonicalize(text) == text`` for every document's canonical text;
* offset round trip: for random canonical spans cut at token boundaries (so no combining sequence is split),
  the raw slice the offset map gives canonicalizes back to the span (``canonicalize_fragment``);
* token-count drift: tokens(canonical) / tokens(raw) per document, summarized per document class (format);
  a document whose ratio is more than ``drift_tolerance`` from its class median is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragassay.corpus.canonical import canonicalize, canonicalize_fragment
from ragassay.metrics.tokens import count_tokens, token_spans

DEFAULT_SPANS = 50
DEFAULT_DRIFT_TOLERANCE = 0.05


@dataclass
class CorpusCheck:
    n_docs: int
    n_spans: int
    failures: dict[str, list[str]] = field(default_factory=dict)  # doc_id -> problems
    drift: dict[str, dict] = field(default_factory=dict)  # class -> summary
    ratios: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {"ok": self.ok, "n_docs": self.n_docs, "n_spans_checked": self.n_spans,
                "failures": self.failures, "token_drift_by_class": self.drift, "token_ratio": self.ratios}


def check_corpus(corpus, *, n_spans: int = DEFAULT_SPANS, seed: int = 0,
                 drift_tolerance: float = DEFAULT_DRIFT_TOLERANCE) -> CorpusCheck:
    rng = np.random.default_rng(seed)
    failures: dict[str, list[str]] = {}
    ratios: dict[str, float] = {}
    classes: dict[str, list[str]] = {}
    checked = 0
    for doc in corpus:
        problems = []
        if canonicalize(doc.text) != doc.text:
            problems.append("canonicalization is not idempotent: canonicalize(text) != text")
        toks = token_spans(doc.text)
        if len(toks):
            a = rng.integers(0, len(toks), size=n_spans)
            b = np.minimum(a + rng.integers(1, 40, size=n_spans), len(toks))
            for i, j in zip(a.tolist(), b.tolist(), strict=True):
                s, e = int(toks[i, 0]), int(toks[j - 1, 1])
                rs, re_ = doc.raw_span(s, e)
                checked += 1
                if canonicalize_fragment(doc.raw[rs:re_]) != doc.text[s:e]:
                    problems.append(f"offset round trip fails for canonical [{s}, {e}) -> raw [{rs}, {re_})")
                    break
        raw_tokens = count_tokens(doc.raw)
        ratios[doc.doc_id] = count_tokens(doc.text) / raw_tokens if raw_tokens else float("nan")
        classes.setdefault(doc.fmt, []).append(doc.doc_id)
        if problems:
            failures[doc.doc_id] = problems
    drift = {}
    for cls, ids in sorted(classes.items()):
        r = np.asarray([ratios[i] for i in ids], dtype=float)
        ok = r[~np.isnan(r)]
        med = float(np.median(ok)) if len(ok) else float("nan")
        out = [i for i in ids if ratios[i] == ratios[i] and abs(ratios[i] - med) > drift_tolerance]
        drift[cls] = {"n_docs": len(ids), "median": med, "min": float(ok.min()) if len(ok) else None,
                      "max": float(ok.max()) if len(ok) else None, "outliers": out}
        for i in out:
            failures.setdefault(i, []).append(f"token ratio {ratios[i]:.3f} is more than {drift_tolerance} from "
                                              f"the {cls} median {med:.3f}")
    return CorpusCheck(len(corpus), checked, failures, drift, ratios)
