"""Attachments (the image and document blocks of user content) as the providers take them.

Media types the run pipeline accepts (``Accepts`` says which ones a provider takes):

- images: ``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp`` (what every provider
  here takes);
- documents: ``application/pdf``; the text documents ``text/plain``, ``text/markdown``,
  ``text/csv``, ``text/html`` (UTF-8); the office files ``.doc``, ``.docx``, ``.xls``,
  ``.xlsx`` (``OFFICE_TYPES``).

A block gives its bytes as base64 ``data`` or by an ``https://`` ``url``. An adapter whose
provider fetches URLs itself passes them on; every other URL is fetched here, under the SSRF
guard (``providers.attachment_fetch``), and sent inline. A text document goes as the provider's
own text document where it has one, else as a text part naming the document
(``document_text_part``). A block a provider cannot take (a PDF in a history replayed to a
model without document input) is sent as a short text saying it was left out (``left_out``):
the run pipeline refuses such blocks in new input, naming the model.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from providers.messages import (
    Attachment,
    DocumentContent,
    ImageContent,
    Message,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF = "application/pdf"
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "text/html"})
OFFICE_TYPES = frozenset({
    "application/msword",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"})
DOCUMENT_TYPES = frozenset({PDF}) | TEXT_TYPES | OFFICE_TYPES
EXTENSIONS = {PDF: "pdf", "text/plain": "txt", "text/markdown": "md", "text/csv": "csv",
              "text/html": "html", "application/msword": "doc",
              "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
              "application/vnd.ms-excel": "xls",
              "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
              "image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
"""The file extension of each media type (Bedrock's ``format``, a file name's suffix)."""


@dataclass(frozen=True, slots=True)
class Accepts:
    """What a provider takes besides text: images given as data, attachments given by URL
    (passed on or fetched by its adapter), and the document media types it reads."""

    images: bool = True
    urls: bool = False
    documents: frozenset[str] = frozenset()

    def describe(self) -> str:
        """What it takes, in words (for an error naming what a model cannot take)."""
        kinds = ["text"] + (["images"] if self.images else [])
        if self.documents:
            kinds.append("documents (" + ", ".join(sorted(self.documents)) + ")")
        return ", ".join(kinds) + ("; attachments by URL" if self.urls else "; no URLs")


BASIC = Accepts()
"""A provider that says nothing of what it takes: text and images given as data (what every
provider took before attachments had URLs and documents)."""
EVERYTHING = Accepts(images=True, urls=True, documents=DOCUMENT_TYPES)


def is_text(mime_type: str | None) -> bool:
    """Whether the media type is one of the text documents."""
    return mime_type in TEXT_TYPES


def decoded_size(data: str) -> int:
    """The number of bytes base64 ``data`` decodes to (without decoding it)."""
    return len(data) * 3 // 4 - len(data[-2:]) + len(data[-2:].rstrip("="))


def decode(data: str) -> bytes:
    """Base64 ``data`` as bytes (``ValueError`` when it is not base64)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc


def document_text(document: DocumentContent) -> str:
    """The text of an inline text document (undecodable bytes replaced)."""
    return decode(document.data or "").decode("utf-8", "replace")


_ALIASES = {"jpeg": {"jpg"}, "html": {"htm"}, "md": {"markdown"}}


def file_name(block: Attachment) -> str:
    """A file name for the block: its ``name`` (or ``document``), with the extension of its
    media type added unless it ends with it (a provider may read the type from it)."""
    name = (block.name if isinstance(block, DocumentContent) else None) or "document"
    extension = EXTENSIONS.get(block.mime_type or "")
    suffix = name.rpartition(".")[2].lower() if "." in name.strip(".") else ""
    if extension and suffix not in {extension, *_ALIASES.get(extension, ())}:
        name = f"{name}.{extension}"
    return name


def data_url(block: Attachment) -> str:
    """An inline block as a ``data:`` URL."""
    return f"data:{block.mime_type};base64,{block.data}"


def document_text_part(document: DocumentContent) -> str:
    """An inline text document as text for a provider without text documents."""
    name = file_name(document).replace('"', "'")
    return (f'<document name="{name}" media_type="{document.mime_type}">\n'
            f"{document_text(document)}\n</document>")


def left_out(block: Attachment, provider: str) -> str:
    """The text sent in place of a block ``provider`` cannot take."""
    what = f"document {file_name(block)}" if isinstance(block, DocumentContent) else "image"
    return f"[{what} ({block.mime_type or 'unknown type'}) left out: {provider} cannot read it]"


C = TypeVar("C")


async def _content(content: list[C], swap: Callable[[Attachment], Awaitable[Attachment]],
                   keep: Callable[[Attachment], bool]) -> list[C] | None:
    """``content`` with each URL block ``keep`` refuses swapped; None when none was."""
    out: list[C] = []
    changed = False
    for block in content:
        if isinstance(block, ImageContent | DocumentContent) and block.url and not keep(block):
            swapped = await swap(block)
            out.append(swapped)  # type: ignore[arg-type]  # an attachment stays one
            changed = True
        else:
            out.append(block)
    return out if changed else None


async def inline_urls(messages: list[Message], fetch: Callable[[Attachment], Awaitable[Attachment]],
                      keep: Callable[[Attachment], bool]) -> list[Message]:
    """``messages`` with every attachment given by URL that ``keep`` refuses replaced by
    ``fetch(block)`` (its bytes inline); messages with nothing to replace are the same
    objects, so a history without URLs costs one pass."""
    out: list[Message] = []
    for message in messages:
        if isinstance(message, UserMessage) and not isinstance(message.content, str):
            user = await _content(message.content, fetch, keep)
            out.append(message if user is None else dataclasses.replace(message, content=user))
        elif isinstance(message, ToolResultMessage):
            result = await _content(message.content, fetch, keep)
            out.append(message if result is None
                       else dataclasses.replace(message, content=result))
        else:
            out.append(message)
    return out


def text_or_left_out(block: Attachment, provider: str) -> TextContent:
    """A text document's text part, or the ``left_out`` note for anything else."""
    if isinstance(block, DocumentContent) and is_text(block.mime_type) and block.data:
        return TextContent(text=document_text_part(block))
    return TextContent(text=left_out(block, provider))
