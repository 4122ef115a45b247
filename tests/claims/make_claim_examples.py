"""Write the bundled claim-validation examples (``data/judge_examples/claims_check.jsonl`` and
``claims_extract.jsonl``) from the bundled license golden set, deterministically (seed 5). Every label follows
from how its item is built, so every line says ``"labelled_by": "automated"``.

``claims_check``: the passage is an evidence quote of grade 2 or more; ``entailed``: the claim is the quote's
first sentence verbatim; ``contradicted``: that sentence with its first modal negated (``must`` → ``must not``,
``may`` → ``may not``, ``is`` → ``is not``) or a ``not`` removed; ``neutral``: the first sentence of a quote
from another document sharing under 20% of its words of four letters or more with the passage. ``claims_extract``: the text joins two or three
reference answers of different queries; the claims are those answers' sentences.

Run ``python -m tests.claims.make_claim_examples`` from the repository root to rewrite them.
"""

from __future__ import annotations

import json
import random
import re
from importlib import resources
from pathlib import Path

import yaml

OUT = Path(str(resources.files("ragassay") / "data" / "judge_examples"))
_WORD = re.compile(r"(?u)\w+")
_NEGATE = re.compile(r"\b(must|may|shall|is|are|can|will)\b(?! not)")
_NOT = re.compile(r"\b(must|may|shall|is|are|can|will|do|does) not\b")


def _first_sentence(text: str) -> str:
    from ragassay.pipeline.chunkers import sentence_spans

    spans = sentence_spans(text)
    return text[spans[0][0]:spans[0][1]] if spans else text


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 3}


def _contradict(sentence: str) -> str | None:
    if _NOT.search(sentence):
        return _NOT.sub(lambda m: m.group(1), sentence, count=1)
    if _NEGATE.search(sentence):
        return _NEGATE.sub(lambda m: f"{m.group(1)} not", sentence, count=1)
    return None


def build(seed: int = 5) -> tuple[list[dict], list[dict]]:
    src = resources.files("ragassay") / "data" / "golden" / "licenses.yaml"
    queries = yaml.safe_load(src.read_text(encoding="utf-8"))["queries"]
    rng = random.Random(seed)
    quotes = [(q["query_id"], e["doc_id"], " ".join(e["quote"].split())) for q in queries
              for e in q.get("evidence") or [] if e.get("grade", 0) >= 2]
    check: list[dict] = []
    for k, (_qid, doc, quote) in enumerate(quotes):
        first = _first_sentence(quote)
        if len(_words(first)) < 4:
            continue
        case = k % 3
        base = {"passage": quote, "case": None, "labelled_by": "automated", "kind": "claim_check"}
        if case == 0:
            check.append({**base, "claim": first, "label": "entailed", "case": "verbatim"})
        elif case == 1:
            flipped = _contradict(first)
            if flipped is None:
                continue
            check.append({**base, "claim": flipped, "label": "contradicted", "case": "negation_flipped"})
        else:
            others = [o for o in quotes if o[1] != doc and len(_words(_first_sentence(o[2])) & _words(quote))
                      < 0.2 * max(len(_words(_first_sentence(o[2]))), 1)]
            if not others:
                continue
            other = _first_sentence(rng.choice(others)[2])
            check.append({**base, "claim": other, "label": "neutral", "case": "other_document"})
    for i, it in enumerate(check, 1):
        it["item_id"] = f"chk-{i:03d}"
    refs = [(q["query_id"], " ".join(q["reference_answer"].split())) for q in queries if q.get("reference_answer")]
    rng.shuffle(refs)
    extract = []
    k = 0
    while k + 2 <= len(refs):
        n = 2 + (len(extract) % 2)
        group = refs[k:k + n]
        k += n
        from ragassay.pipeline.chunkers import sentence_spans

        claims = [r[s:e].rstrip(".") for _, r in group for s, e in sentence_spans(r)]
        extract.append({"item_id": f"ext-{len(extract) + 1:03d}", "text": " ".join(r for _, r in group),
                        "claims": claims, "case": "+".join(q for q, _ in group), "labelled_by": "automated",
                        "kind": "claim_extract"})
    return check, extract


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def main() -> None:
    check, extract = build()
    (OUT / "claims_check.jsonl").write_text(render(check), encoding="utf-8")
    (OUT / "claims_extract.jsonl").write_text(render(extract), encoding="utf-8")
    print(f"claims_check.jsonl {len(check)} items, claims_extract.jsonl {len(extract)} items")


if __name__ == "__main__":
    main()
