"""Readable text out of HTML with the standard library's ``html.parser``.

Script, style and other non-content elements are dropped; block elements become line breaks;
runs of whitespace collapse. Good enough for a model to read a page, not a renderer.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIP = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"}
_BLOCK = {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
          "footer", "nav", "aside", "main", "pre", "blockquote", "hr", "form", "dd", "dt",
          "h1", "h2", "h3", "h4", "h5", "h6", "title", "figcaption"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source",
         "track", "wbr", "param"}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n\s*\n+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP and tag not in _VOID:
            self._skip_depth += 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP and self._skip_depth:
            self._skip_depth -= 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The page's readable text, title first when it has one."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    body = _SPACES.sub(" ", "".join(parser.parts))
    body = "\n".join(line.strip() for line in body.split("\n"))
    body = _BLANKS.sub("\n\n", body).strip()
    title = " ".join(parser.title.split())
    return f"# {title}\n\n{body}" if title else body
