"""HTML to text, keeping tables readable: one table row per line, cells joined by `` | ``.

Block elements end a line, ``<br>`` breaks one, ``script``/``style``/``template`` content is dropped and
character references are decoded. The output is the document's *raw text*; canonical offsets map back
into it (not into the markup).
"""

from __future__ import annotations

from html.parser import HTMLParser

_BLOCK = {
    "p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "h1", "h2", "h3", "h4",
    "h5", "h6", "ul", "ol", "li", "dl", "dt", "dd", "pre", "blockquote", "table", "thead", "tbody",
    "tfoot", "caption", "figure", "figcaption", "hr", "title", "address",
}
_DROP = {"script", "style", "template", "noscript", "head"}
CELL_SEPARATOR = " | "


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.drop_depth = 0
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.title: list[str] = []
        self.in_title = False

    def _newline(self) -> None:
        if self.out and not self.out[-1].endswith("\n"):
            self.out.append("\n")

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "title":
            self.in_title = True
        if tag in _DROP:
            self.drop_depth += 1
            return
        if tag == "tr":
            self._newline()
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag == "br":
            if self.cell is not None:
                self.cell.append(" ")
            else:
                self.out.append("\n")
        elif tag in _BLOCK:
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _DROP:
            self.drop_depth = max(0, self.drop_depth - 1)
            return
        if tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.out.append(CELL_SEPARATOR.join(self.row))
            self.out.append("\n")
            self.row = None
        elif tag in _BLOCK:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.drop_depth:
            return
        if self.cell is not None:
            self.cell.append(data)
        elif self.row is not None:
            return  # whitespace between cells
        else:
            self.out.append(data)


def html_to_text(markup: str) -> tuple[str, str | None]:
    """Return ``(text, title)`` for an HTML document."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    title = " ".join("".join(parser.title).split()) or None
    return "".join(parser.out), title
