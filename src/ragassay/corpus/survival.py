"""Parse measurement (spec §4): answer-span survival, parse-quality proxies, text and table fidelity, reading order.

**Span survival** (§4.5). For each golden evidence span: is its quote still in the parsed text of its document?
Both sides are canonicalized (the pipeline's normalizer) and cut into regex-wordpunct-v1 tokens, the units a
lexical retriever and the chunker see:

* ``exact``: the quote's token sequence occurs contiguously in the parse (whitespace and line breaks between
  tokens may differ; a quote glued to a neighbouring word, "ClauseYes", is not exact);
* ``fuzzy``: otherwise, the best alignment of the quote's lower-cased tokens against any stretch of the parse
  has token edit similarity ``1 - d / len(quote)`` of at least ``threshold`` (0.9 by default);
* ``lost``: neither. No retriever can return a lost span: the share that survives is the recall ceiling.

The gap between exact and fuzzy points at normalization (whitespace, ligatures, hyphenation), not parsing.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np

from ragassay.corpus.canonical import canonicalize, canonicalize_fragment
from ragassay.errors import InputError

_TOKEN = re.compile(r"\w+|[^\w\s]")
DEFAULT_THRESHOLD = 0.9
STATUSES = ("exact", "fuzzy", "lost")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


class _Vocab:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode(self, toks: list[str]) -> np.ndarray:
        ids = self.ids
        return np.fromiter((ids.setdefault(t, len(ids)) for t in toks), dtype=np.int64, count=len(toks))


def _contains(hay: np.ndarray, needle: np.ndarray) -> bool:
    if len(needle) == 0:
        return True
    if len(needle) > len(hay):
        return False
    cand = np.flatnonzero(hay[: len(hay) - len(needle) + 1] == needle[0])
    for k in range(1, len(needle)):
        if not len(cand):
            return False
        cand = cand[hay[cand + k] == needle[k]]
    return bool(len(cand))


def best_alignment(hay: np.ndarray, needle: np.ndarray) -> int:
    """Least edit distance between ``needle`` and any contiguous stretch of ``hay`` (Sellers 1980).

    Row by row over the needle; the left-to-right insertion chain of each row is a running minimum of
    ``row - j``, so every row is a handful of array operations over the whole haystack.
    """
    n = len(hay)
    j = np.arange(n + 1, dtype=np.int64)
    prev = np.zeros(n + 1, dtype=np.int64)
    for i, tok in enumerate(needle.tolist(), 1):
        cand = np.empty(n + 1, dtype=np.int64)
        cand[0] = i
        cand[1:] = np.minimum(prev[:-1] + (hay != tok), prev[1:] + 1)
        prev = np.minimum.accumulate(cand - j) + j
    return int(prev.min())


@dataclass
class SpanStatus:
    query_id: str
    stratum: str
    doc_id: str
    doc_format: str
    grade: int
    quote: str
    status: str
    similarity: float


@dataclass
class Survival:
    spans: list[SpanStatus]
    threshold: float
    parser: str
    missing_docs: list[str] = field(default_factory=list)

    def table(self, by: str) -> list[dict]:
        """Rows of exact / exact-or-fuzzy / lost shares grouped by ``stratum`` or ``doc_format``."""
        groups: dict[str, list[SpanStatus]] = {}
        for s in self.spans:
            groups.setdefault(getattr(s, by), []).append(s)
        rows = [_row(k, v) for k, v in sorted(groups.items())]
        rows.append(_row("all", self.spans))
        return rows

    def to_dict(self) -> dict:
        return {"parser": self.parser, "threshold": self.threshold, "missing_docs": self.missing_docs,
                "by_stratum": self.table("stratum"), "by_format": self.table("doc_format"),
                "lost": [s.__dict__ for s in self.spans if s.status == "lost"]}


def _row(key: str, spans: list[SpanStatus]) -> dict:
    n = len(spans)
    c = Counter(s.status for s in spans)
    nan = float("nan")
    return {"group": key, "n": n, "exact": c["exact"] / n if n else nan,
            "exact_or_fuzzy": (c["exact"] + c["fuzzy"]) / n if n else nan,
            "lost": c["lost"] / n if n else nan, "n_lost": c["lost"]}


def span_survival(parsed: dict[str, tuple[str, str]], golden, *, threshold: float = DEFAULT_THRESHOLD,
                  parser: str = "given") -> Survival:
    """Survival of every evidence span of ``golden`` in ``parsed`` = {doc_id: (text, format)}.

    A document the parse does not contain loses all its spans (listed in ``missing_docs``).
    """
    if not 0 < threshold <= 1:
        raise InputError(f"fuzzy threshold must lie in (0, 1], got {threshold}")
    vocab, vocab_lower = _Vocab(), _Vocab()
    hay: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for doc_id, (text, _) in parsed.items():
        toks = _tokens(canonicalize(text))
        hay[doc_id] = (vocab.encode(toks), vocab_lower.encode([t.lower() for t in toks]))
    out, missing = [], set()
    for q in golden:
        for ev in q.evidence:
            qt = _tokens(canonicalize_fragment(ev.quote).strip())
            fmt = parsed[ev.doc_id][1] if ev.doc_id in parsed else "missing"
            if ev.doc_id not in hay:
                missing.add(ev.doc_id)
                status, sim = "lost", 0.0
            elif _contains(hay[ev.doc_id][0], vocab.encode(qt)):
                status, sim = "exact", 1.0
            else:
                d = best_alignment(hay[ev.doc_id][1], vocab_lower.encode([t.lower() for t in qt]))
                sim = 1 - d / max(len(qt), 1)
                status = "fuzzy" if sim >= threshold else "lost"
            out.append(SpanStatus(q.query_id, q.stratum, ev.doc_id, fmt, ev.grade, ev.quote, status, sim))
    return Survival(out, threshold, parser, sorted(missing))


# ---------------------------------------------------------------- proxies (§4.3)

GATES = {  # (min, max) per document; NaN (undefined) never fails a gate
    "chars_per_page": (200.0, None),
    "script_sanity": (0.98, None),
    "replacement_char_rate": (None, 0.001),
    "word_shape": (0.85, None),
    "table_cell_density": (0.5, None),
}
_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]\s*>", re.S | re.I)
_TAGS = re.compile(r"<[^>]*>")


def parse_proxies(text: str, n_bytes: int, n_pages: int | None = None, source_html: str | None = None) -> dict:
    """Ground-truth-free parse quality figures of one document; NaN where a figure is undefined.

    text_yield = parsed chars / source bytes; chars_per_page (PDF only); replacement_char_rate = U+FFFD
    share; script_sanity = share of letters, digits, punctuation, separators and whitespace; word_shape =
    share of whitespace-separated words of length 2..30; table_cell_density = non-empty cells / cells of
    the source markup (HTML only).
    """
    n = len(text)
    nan = float("nan")
    counts = Counter(text)
    ok = sum(c for ch, c in counts.items() if ch.isspace() or unicodedata.category(ch)[0] in "LNPZ")
    words = text.split()
    cells = _CELL.findall(source_html) if source_html else []
    return {
        "text_yield": n / n_bytes if n_bytes else nan,
        "chars_per_page": n / n_pages if n_pages else nan,
        "replacement_char_rate": counts.get("\ufffd", 0) / n if n else nan,
        "script_sanity": ok / n if n else nan,
        "word_shape": sum(1 for w in words if 1 < len(w) <= 30) / len(words) if words else nan,
        "table_cell_density": (sum(1 for c in cells if _TAGS.sub("", c).strip()) / len(cells)) if cells else nan,
    }


def proxy_flags(proxies: dict) -> list[str]:
    """Names of the gates a document fails."""
    out = []
    for k, (lo, hi) in GATES.items():
        v = proxies.get(k, float("nan"))
        if v != v:
            continue
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            out.append(k)
    return out


def distribution(values) -> dict:
    """min / p5 / p50 / p95 / max over the defined values, with the count of undefined ones."""
    v = np.asarray(values, dtype=float)
    ok = v[~np.isnan(v)]
    stats = {k: float(np.percentile(ok, p)) if len(ok) else None
             for k, p in (("min", 0), ("p5", 5), ("p50", 50), ("p95", 95), ("max", 100))}
    return {**stats, "n": int(len(ok)), "n_undefined": int(len(v) - len(ok))}


# ---------------------------------------------------------------- fidelity against a reference (§4.2)

def text_fidelity(parsed: str, reference: str) -> dict:
    """Character edit distance after canonicalizing both: CER = d / len(reference); NED = d / max(lengths)
    (OmniDocBench's normalized edit distance; 0 is perfect). Undefined (NaN) for two empty texts."""
    from rapidfuzz.distance import Levenshtein

    a, b = canonicalize(parsed), canonicalize(reference)
    d = Levenshtein.distance(a, b)
    nan = float("nan")
    return {"edit_distance": d, "cer": d / len(b) if b else nan,
            "ned": d / max(len(a), len(b)) if (a or b) else nan}


@dataclass
class TableNode:
    tag: str
    text: str = ""
    colspan: int = 1
    rowspan: int = 1
    children: list[TableNode] = field(default_factory=list)


class _TableBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.roots: list[TableNode] = []
        self.stack: list[TableNode] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ("table", "tr", "td", "th", "thead", "tbody", "tfoot"):
            return
        a = dict(attrs)
        node = TableNode("td" if tag == "th" else tag, colspan=int(a.get("colspan") or 1),
                         rowspan=int(a.get("rowspan") or 1))
        if tag in ("thead", "tbody", "tfoot"):
            node.tag = tag
        if self.stack:
            self.stack[-1].children.append(node)
        elif tag == "table":
            self.roots.append(node)
        else:
            return
        self.stack.append(node)

    def handle_endtag(self, tag):
        tag = "td" if tag == "th" else tag
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if self.stack and self.stack[-1].tag == "td":
            self.stack[-1].text += data


def html_tables(markup: str) -> list[TableNode]:
    """Every top-level ``<table>`` of ``markup``, in order, as trees of table/thead/tbody/tr/td nodes (th
    counts as td; a table nested in a cell stays inside that cell)."""
    b = _TableBuilder()
    b.feed(markup)
    b.close()
    return b.roots


def table_tree(markup: str) -> TableNode:
    """The first ``<table>`` of ``markup`` (see :func:`html_tables`)."""
    tables = html_tables(markup)
    if not tables:
        raise InputError("no <table> element found in the markup")
    return tables[0]


_RULE_CELL = re.compile(r"\s*:?-+:?\s*")


def pipe_tables(text: str) -> list[TableNode]:
    """Tables written as text, one row per line with cells split at ``|``: the table-aware parser's output
    (``a | b``) and Markdown tables (``| a | b |``, whose ``|---|`` rule rows are skipped).

    A table is a run of lines holding a ``|``; blank lines inside the run are skipped (the table-aware parser
    puts them between rows), any other line ends it. A rule row is skipped only as a run's second line, where
    Markdown puts it: elsewhere a row of dashes (``- | -``) is data. A one-column table has no ``|`` and is
    not found.
    """
    tables: list[TableNode] = []
    rows: list[TableNode] = []
    run = 0  # lines holding a ``|`` in the current run, the rule row included
    for line in text.split("\n"):
        s = line.strip()
        if "|" in s:
            run += 1
            cells = s.removeprefix("|").removesuffix("|").split("|")
            if run != 2 or not all(_RULE_CELL.fullmatch(c) for c in cells):
                rows.append(TableNode("tr", children=[TableNode("td", text=c.strip()) for c in cells]))
        elif s and run:
            if rows:
                tables.append(TableNode("table", children=rows))
            rows, run = [], 0
    if rows:
        tables.append(TableNode("table", children=rows))
    return tables


def rows_only(t: TableNode) -> TableNode:
    """``t`` with its row groups (thead, tbody, tfoot) spliced out, their rows put in their place: text output
    cannot carry row groups, so a parse compared with HTML would otherwise lose a node per group."""
    kids: list[TableNode] = []
    for c in t.children:
        flat = rows_only(c)
        kids.extend(flat.children if c.tag in ("thead", "tbody", "tfoot") else [flat])
    return TableNode(t.tag, t.text, t.colspan, t.rowspan, kids)


def parsed_tables(text: str) -> list[TableNode]:
    """The tables of a parse: its HTML ``<table>`` elements if it has any, else its pipe tables
    (:func:`pipe_tables`); row groups spliced out (:func:`rows_only`)."""
    tables = html_tables(text) if "<table" in text.lower() else []
    return [rows_only(t) for t in tables or pipe_tables(text)]


def _size(t: TableNode) -> int:
    return 1 + sum(_size(c) for c in t.children)


def teds(a: str | TableNode, b: str | TableNode, *, structure_only: bool = False) -> float:
    """Tree-edit-distance similarity of two tables (Zhong et al. 2020, PubTabNet):
    ``1 - TED(a, b) / max(|a|, |b|)`` with unit insert/delete cost and a rename cost of 1 between different
    tags or cell spans, else (cells) the normalized Levenshtein distance of the cell texts (0 with
    ``structure_only``). Tree edit distance by Zhang-Shasha (the ``zss`` package)."""
    import zss
    from rapidfuzz.distance import Levenshtein

    ta = table_tree(a) if isinstance(a, str) else a
    tb = table_tree(b) if isinstance(b, str) else b

    def update(x: TableNode, y: TableNode) -> float:
        if x.tag != y.tag or (x.tag == "td" and (x.colspan, x.rowspan) != (y.colspan, y.rowspan)):
            return 1.0
        if x.tag != "td" or structure_only:
            return 0.0
        sx, sy = " ".join(x.text.split()), " ".join(y.text.split())
        return Levenshtein.normalized_distance(sx, sy)

    d = zss.distance(ta, tb, lambda n: n.children, lambda n: 1.0, lambda n: 1.0, update)
    return 1.0 - d / max(_size(ta), _size(tb))


def table_fidelity(parsed: str, reference_markup: str) -> dict:
    """TEDS of every reference table of one document against the tables of its parse (:func:`parsed_tables`;
    row groups spliced out of both sides).

    Reference and parsed tables are paired one to one to maximize the summed TEDS (Hungarian assignment), so a
    dropped or extra table does not shift the others. A reference table left without a partner scores 0 (the
    parse lost it); parsed tables left over are counted as ``n_extra``. ``teds`` and ``teds_struct`` are
    means over the reference tables; NaN when the reference has no table.
    """
    from scipy.optimize import linear_sum_assignment

    refs = [rows_only(t) for t in html_tables(reference_markup)]
    got = parsed_tables(parsed)
    sim = np.array([[teds(g, r) for g in got] for r in refs]).reshape(len(refs), len(got))
    rows, cols = linear_sum_assignment(sim, maximize=True)
    match = dict(zip(rows.tolist(), cols.tolist(), strict=True))
    tables = []
    for i, r in enumerate(refs):
        j = match.get(i)
        tables.append({"index": i, "parsed_index": j, "teds": float(sim[i, j]) if j is not None else 0.0,
                       "teds_struct": float(teds(got[j], r, structure_only=True)) if j is not None else 0.0})
    nan = float("nan")
    return {"teds": float(np.mean([t["teds"] for t in tables])) if tables else nan,
            "teds_struct": float(np.mean([t["teds_struct"] for t in tables])) if tables else nan,
            "n_tables": len(refs), "n_parsed_tables": len(got), "n_unmatched": len(refs) - len(match),
            "n_extra": len(got) - len(match), "tables": tables}


# ---------------------------------------------------------------- reading order (§4.2)

def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b (ties in either ranking corrected), all pairs at once; NaN when undefined."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) != len(y):
        raise InputError(f"kendall_tau_b needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return float("nan")
    iu = np.triu_indices(len(x), 1)
    sx = np.sign(x[:, None] - x[None, :])[iu]
    sy = np.sign(y[:, None] - y[None, :])[iu]
    n0 = len(sx)
    n1 = n0 - np.count_nonzero(sx)  # pairs tied in x
    n2 = n0 - np.count_nonzero(sy)
    denom = np.sqrt(float(n0 - n1) * float(n0 - n2))
    return float((sx * sy).sum() / denom) if denom > 0 else float("nan")


def _folded(text: str) -> str:
    return " ".join(canonicalize(text).split())


def text_blocks(text: str) -> list[str]:
    """The blocks (paragraphs) of a reference text: canonical text cut at blank lines, empty pieces dropped."""
    return [b.strip() for b in re.split(r"\n[ \t]*\n", canonicalize(text)) if b.strip()]


def reading_order_tau(parsed: str, reference_blocks: list[str]) -> dict:
    """Kendall tau-b between the reference order of blocks (paragraphs) and where each is first found in the
    parse. Both sides are canonicalized with every whitespace run (line breaks included) folded to one space,
    so a block whose lines were reflowed is still found. Blocks the parse lost are counted, not ranked; an
    empty block is no block. NaN with fewer than two blocks found, or with every found block at one place (a
    block repeated in the reference is found at its first occurrence each time)."""
    hay = _folded(parsed)
    blocks = [f for f in map(_folded, reference_blocks) if f]
    pos = [hay.find(b) for b in blocks]
    found = [(i, p) for i, p in enumerate(pos) if p >= 0]
    tau = kendall_tau_b([i for i, _ in found], [p for _, p in found]) if found else float("nan")
    return {"tau": tau, "n_blocks": len(blocks), "n_found": len(found)}


def _mean(values: list[float]) -> dict:
    v = np.asarray(values, dtype=float)
    ok = v[~np.isnan(v)]
    return {"mean": float(ok.mean()) if len(ok) else float("nan"), "n": int(len(ok)),
            "n_undefined": int(len(v) - len(ok))}


def parse_fidelity(parsed: dict[str, str], reference_text: dict[str, str] | None = None,
                   reference_tables: dict[str, str] | None = None) -> dict:
    """Fidelity of a parse {doc_id: text} against reference texts and reference HTML tables {doc_id: ...}.

    Per document: NED, CER and edit distance (:func:`text_fidelity`) and reading-order tau
    (:func:`reading_order_tau` over :func:`text_blocks` of the reference text); TEDS (:func:`table_fidelity`).
    A document without a reference has every such figure undefined (NaN), never 0. The summary gives each
    figure's mean over the documents where it is defined (TEDS: over all reference tables), with the number
    of documents where it is undefined.
    """
    nan = float("nan")
    text_keys = ("edit_distance", "cer", "ned", "tau", "n_blocks", "n_found")
    table_keys = ("teds", "teds_struct", "n_tables", "n_parsed_tables", "n_unmatched", "n_extra", "tables")
    docs: dict[str, dict] = {}
    for doc_id, text in parsed.items():
        row: dict = {}
        if reference_text is not None:
            ref = reference_text.get(doc_id)
            row |= dict.fromkeys(text_keys, nan) if ref is None else {
                **text_fidelity(text, ref), **reading_order_tau(text, text_blocks(ref))}
        if reference_tables is not None:
            ref = reference_tables.get(doc_id)
            row |= {k: None if k == "tables" else nan for k in table_keys} if ref is None else \
                table_fidelity(text, ref)
        docs[doc_id] = row
    summary: dict = {"n_docs": len(parsed)}
    if reference_text is not None:
        with_ref = [d for d in parsed if d in reference_text]
        summary["text"] = {"n_docs_with_reference": len(with_ref), "n_docs_undefined": len(parsed) - len(with_ref),
                           **{k: _mean([docs[d][k] for d in parsed]) for k in ("ned", "cer", "tau")}}
    if reference_tables is not None:
        with_ref = [d for d in parsed if d in reference_tables]
        per_table = [t for d in with_ref for t in docs[d]["tables"]]
        summary["tables"] = {
            "n_docs_with_reference": len(with_ref), "n_docs_undefined": len(parsed) - len(with_ref),
            "n_tables": len(per_table), "n_unmatched": sum(docs[d]["n_unmatched"] for d in with_ref),
            "n_extra": sum(docs[d]["n_extra"] for d in with_ref),
            **{k: _mean([t[k] for t in per_table]) for k in ("teds", "teds_struct")}}
    return {"docs": docs, "summary": summary}
