"""Generated human-labelled items over the bundled license texts, for tests: the label is known by
construction (a verbatim sentence is supported, a sentence from another document is unsupported, a verbatim
sentence with an unsupported tail is partially supported)."""

import json
import re
from pathlib import Path

import numpy as np

from ragassay.corpus import load_corpus
from ragassay.judges.labels import LabelledItem

_LICENSES = Path(__file__).resolve().parents[2] / "src" / "ragassay" / "data" / "licenses"


def sentences(n_docs: int = 8) -> list[tuple[str, str]]:
    out = []
    for p in sorted(_LICENSES.glob("*.txt"))[:n_docs]:
        text = " ".join(p.read_text(encoding="utf-8").split())
        for s in re.split(r"(?<=[.;])\s+", text):
            if 60 <= len(s) <= 220 and re.search(r"[a-z]{4}", s):
                out.append((p.stem, s))
    return out


def make_items(n: int = 240, seed: int = 0, families=("anthropic", "openai")) -> list[dict]:
    rng = np.random.default_rng(seed)
    sents = sentences()
    order = rng.permutation(len(sents))
    items = []
    for k in range(n):
        doc, ctx = sents[order[k % len(sents)]]
        other_doc, other = sents[order[(k * 7 + 3) % len(sents)]]
        kind = k % 4
        if kind == 0:
            claim, label = ctx, "supported"
        elif kind == 1:
            claim, label = other, "unsupported" if other_doc != doc or other != ctx else "supported"
        elif kind == 2:
            claim, label = f"{ctx} {other}", "partially_supported"
        else:
            claim, label = ctx.split(",")[0].strip() + ".", "supported"
        items.append({"item_id": f"gen-{k:04d}", "question": f"What does {doc} say?", "context": ctx,
                      "claim": claim, "label": label, "case": ["plain", "absent", "partial", "short"][kind],
                      "doc_id": doc, "generator_family": families[k % len(families)]})
    return items


def write_labels(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return path


def as_items(rows: list[dict]) -> list[LabelledItem]:
    return [LabelledItem(**{k: v for k, v in r.items()}) for r in rows]


__all__ = ["as_items", "load_corpus", "make_items", "sentences", "write_labels"]
