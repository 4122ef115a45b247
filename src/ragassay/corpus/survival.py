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
        self.root: TableNode | None = None
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
        elif tag == "table" and self.root is None:
            self.root = node
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


def table_tree(markup: str) -> TableNode:
    """The first ``<table>`` of ``markup`` as a tree of table/thead/tbody/tr/td nodes (th counts as td)."""
    b = _TableBuilder()
    b.feed(markup)
    b.close()
    if b.root is None:
        raise InputError("no <table> element found in the markup")
    return b.root


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


def reading_order_tau(parsed: str, reference_blocks: list[str]) -> dict:
    """Kendall tau-b between the reference order of blocks (paragraphs) and where each is found in the parse
    (canonical text, first exact occurrence). Blocks the parse lost are counted, not ranked."""
    hay = canonicalize(parsed)
    pos = [hay.find(canonicalize(b).strip()) for b in reference_blocks]
    found = [(i, p) for i, p in enumerate(pos) if p >= 0]
    tau = kendall_tau_b([i for i, _ in found], [p for _, p in found]) if found else float("nan")
    return {"tau": tau, "n_blocks": len(reference_blocks), "n_found": len(found)}
