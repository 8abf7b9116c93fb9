"""Readable text out of HTML, in time linear in the page.

The standard library's ``html.parser`` is quadratic on some inputs (a 2 MB page of ``<a ``
took minutes, on the event loop), so pages are tokenized here with one pattern whose every
alternative starts at ``<`` and cannot cross another ``<``: a failed attempt scans at most to
the next ``<``, so the whole scan is linear. (An attribute value holding a ``<`` splits that
tag; the page still reads.) Comments and ``<script>``/``<style>`` bodies are skipped to their
end with a literal search. Script, style and other non-content elements are dropped; block
elements become line breaks; character references are decoded; runs of whitespace collapse.
Good enough for a model to read a page, not a renderer.
"""

from __future__ import annotations

import html
import re

_SKIP = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"}
_RAW = {"script", "style"}
"""Elements whose content is raw text: nothing in it is a tag until the closing one."""
_BLOCK = {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
          "footer", "nav", "aside", "main", "pre", "blockquote", "hr", "form", "dd", "dt",
          "h1", "h2", "h3", "h4", "h5", "h6", "title", "figcaption"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source",
         "track", "wbr", "param"}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n\s*\n+")


_TOKEN = re.compile(r"<!--|<(/?)([A-Za-z][A-Za-z0-9:_-]*)[^<>]*>|<[!?][^<>]*>")
_RAW_END = {name: re.compile(f"</{name}", re.IGNORECASE) for name in _RAW}
_COMMENT_END = re.compile("-->")


class _Text:
    """What the scan collects: body text parts and the title."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skip_depth = 0
        self.in_title = False

    def data(self, chunk: str) -> None:
        if not chunk:
            return
        text = html.unescape(chunk)
        if self.in_title:
            self.title.append(text)
        elif not self.skip_depth:
            self.parts.append(text)

    def tag(self, name: str, closing: bool) -> None:
        if name == "title":
            self.in_title = not closing
        elif name in _SKIP and name not in _VOID:
            self.skip_depth = max(self.skip_depth - 1, 0) if closing else self.skip_depth + 1
        if name in _BLOCK:
            self.parts.append("\n")


def _end_of(pattern: re.Pattern[str], page: str, pos: int, *, past: bool) -> int:
    m = pattern.search(page, pos)
    if m is None:
        return len(page)
    return m.end() if past else m.start()


def _scan(page: str) -> _Text:
    out, pos = _Text(), 0
    while (m := _TOKEN.search(page, pos)) is not None:
        out.data(page[pos:m.start()])
        pos = m.end()
        name = m.group(2)
        if name is None:
            if m.group(0) == "<!--":
                pos = _end_of(_COMMENT_END, page, pos, past=True)
            continue
        name, closing = name.lower(), m.group(1) == "/"
        out.tag(name, closing)
        if name in _RAW and not closing:  # content unread up to </script (or </style)
            pos = _end_of(_RAW_END[name], page, pos, past=False)
    out.data(page[pos:])
    return out


def html_to_text(page: str) -> str:
    """The page's readable text, title first when it has one."""
    found = _scan(page)
    body = _SPACES.sub(" ", "".join(found.parts))
    body = "\n".join(line.strip() for line in body.split("\n"))
    body = _BLANKS.sub("\n\n", body).strip()
    title = " ".join("".join(found.title).split())
    return f"# {title}\n\n{body}" if title else body
