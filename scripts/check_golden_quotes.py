"""Throwaway checker for the bundled golden set: quotes resolve, strata minimums, ids unique."""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import yaml

BLOCK = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "div", "br", "table", "thead", "tbody", "title"}
MINIMUMS = {"lexical": 25, "paraphrase": 25, "multi_hop": 18, "long_tail": 15, "tabular": 14, "temporal": 18, "negative": 27}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0
        self.cell_in_row = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        if tag == "tr":
            self.cell_in_row = 0
        if tag in ("td", "th"):
            if self.cell_in_row:
                self.out.append(" | ")
            self.cell_in_row += 1
        if tag == "br":
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip -= 1
        if tag in BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data)


def ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def load_docs(root: Path) -> dict[str, str]:
    try:
        from ragassay.corpus import load_corpus

        return {d.doc_id: ws(d.text) for d in load_corpus(root)}
    except ImportError:
        pass
    docs = {}
    for p in sorted(root.iterdir()):
        if p.suffix == ".txt":
            docs[p.stem] = ws(p.read_text())
        elif p.suffix == ".html":
            t = _Text()
            t.feed(p.read_text())
            docs[p.stem] = ws("".join(t.out))
    return docs


def main(src: str, corpus: str) -> int:
    data = yaml.safe_load(Path(src).read_text())
    docs = load_docs(Path(corpus))
    problems: list[str] = []
    ids, questions, strata = set(), set(), {}
    n_nug = n_low = 0
    for q in data["queries"]:
        qid = q["query_id"]
        if qid in ids:
            problems.append(f"{qid}: duplicate id")
        ids.add(qid)
        key = ws(q["question"]).lower()
        if key in questions:
            problems.append(f"{qid}: duplicate question")
        questions.add(key)
        strata[q["stratum"]] = strata.get(q["stratum"], 0) + 1
        if q["stratum"] not in MINIMUMS:
            problems.append(f"{qid}: bad stratum {q['stratum']}")
        if not qid.startswith({"lexical": "lex", "paraphrase": "para", "multi_hop": "mh", "long_tail": "lt",
                               "tabular": "tab", "temporal": "tmp", "negative": "neg"}.get(q["stratum"], "?")):
            problems.append(f"{qid}: prefix does not match stratum")
        ev = q.get("evidence") or []
        if not q["answerable"]:
            if ev:
                problems.append(f"{qid}: negative with evidence")
            if q["stratum"] != "negative":
                problems.append(f"{qid}: unanswerable but not negative")
            if not set(q.get("tags", [])) & {"absent_entity", "near_miss"}:
                problems.append(f"{qid}: negative lacks absent_entity/near_miss tag")
            continue
        if not q.get("reference_answer"):
            problems.append(f"{qid}: no reference answer")
        if not any(e["grade"] >= 2 for e in ev):
            problems.append(f"{qid}: no grade>=2 evidence")
        if any(e["grade"] < 2 for e in ev):
            n_low += 1
        if q.get("nuggets"):
            n_nug += 1
            if not any(n["vital"] for n in q["nuggets"]):
                problems.append(f"{qid}: nuggets without vital")
        if q["stratum"] == "multi_hop" and len({(e['doc_id'], e['quote']) for e in ev if e["grade"] >= 2}) < 2:
            problems.append(f"{qid}: multi_hop with <2 answering spans")
        for e in ev:
            d = docs.get(e["doc_id"])
            if d is None:
                problems.append(f"{qid}: unknown doc {e['doc_id']}")
                continue
            quote = ws(e["quote"])
            n = len(re.findall(re.escape(quote), d))
            n = d.count(quote)
            occ = e.get("occurrence")
            if n == 0:
                problems.append(f"{qid}: not found in {e['doc_id']}: {quote[:70]!r}")
            elif occ is None and n > 1:
                problems.append(f"{qid}: {n} occurrences in {e['doc_id']}: {quote[:70]!r}")
            elif occ is not None and not (1 <= occ <= n):
                problems.append(f"{qid}: occurrence {occ} of {n} in {e['doc_id']}")
    neg = strata.get("negative", 0)
    total = sum(strata.values())
    for s, m in MINIMUMS.items():
        if strata.get(s, 0) < m:
            problems.append(f"stratum {s}: {strata.get(s, 0)} < {m}")
    if neg < 0.15 * total:
        problems.append(f"negatives {neg}/{total} < 15%")
    if n_nug < 45:
        problems.append(f"only {n_nug} queries with nuggets")
    if n_low < 30:
        problems.append(f"only {n_low} queries with grade<2 evidence")
    print("\n".join(problems))
    print(f"total={total} strata={strata} nuggets={n_nug} low_grade={n_low} problems={len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
