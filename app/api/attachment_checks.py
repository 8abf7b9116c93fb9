"""The attachment checks of the run pipeline: the image and document blocks of user content
(``providers.attachments``), in a run's input, a thread post and steer/follow-up content alike.
Each failure names the block's field and, for a kind the model cannot take, the model:

- shape (422 ``validation_error``): exactly one of ``data`` (non-empty base64) and ``url``
  (``https://``, a host, no credentials, not a loopback/private/metadata IP literal or
  ``localhost`` unless ``AGENTLOOP_FETCH_ALLOW_PRIVATE``, which never admits metadata
  addresses); an image's ``mime_type`` one of ``IMAGE_TYPES`` (required with ``data``); a
  document's one of ``DOCUMENT_TYPES``; a text document's data UTF-8; a document ``name`` of
  at most ``NAME_MAX`` characters, none of them control characters;
- the model (400 ``unsupported_attachment``): an attachment kind the run's model does not take
  (``providers.catalog.accepts``): images, a document media type, or attachments by URL;
- size (413 ``attachment_too_large``): a block's decoded data over
  ``AGENTLOOP_ATTACHMENT_MAX_BYTES``, or a request's blocks together over
  ``AGENTLOOP_ATTACHMENT_REQUEST_MAX_BYTES``. A URL's bytes are capped when they are fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from app.api.errors import ApiError
from app.api.services import Services
from providers.attachments import (
    BASIC,
    DOCUMENT_TYPES,
    EVERYTHING,
    IMAGE_TYPES,
    TEXT_TYPES,
    Accepts,
    decode,
)
from providers.catalog import accepts
from providers.messages import Attachment, DocumentContent, ImageContent
from providers.safe_fetch import literal_reason

NAME_MAX = 255


@dataclass(frozen=True, slots=True)
class AttachmentRules:
    """What the attachments of one request are checked against: the run's ``model`` and what
    it ``takes``, the size limits and whether URLs may name private addresses."""

    model: str
    takes: Accepts
    block_max: int
    request_max: int
    allow_private: bool = False


@dataclass(slots=True)
class Budget:
    """Decoded bytes the request's blocks have used so far (against ``request_max``)."""

    used: int = 0


def rules_for(svc: Services, model: str) -> AttachmentRules:
    """The rules for a request whose run uses ``model`` (a model that cannot be resolved
    takes what a provider that says nothing takes)."""
    try:
        provider, _ = svc.resolve_provider(model)
        takes = accepts(provider)
    except ValueError:
        takes = BASIC
    settings = svc.settings
    return AttachmentRules(model=model, takes=takes, block_max=settings.attachment_max_bytes,
                           request_max=settings.attachment_request_max_bytes,
                           allow_private=settings.fetch_allow_private)


def check_result_images(content: list[Any], field: str, svc: Services) -> None:
    """A client tool result's images, checked for shape and size like a message's (what the
    model takes is not asked: a result goes to the model that called the tool)."""
    rules = AttachmentRules(model="", takes=EVERYTHING,
                            block_max=svc.settings.attachment_max_bytes,
                            request_max=svc.settings.attachment_request_max_bytes,
                            allow_private=svc.settings.fetch_allow_private)
    budget = Budget()
    for i, block in enumerate(content):
        if isinstance(block, ImageContent):
            check_attachment(block, f"{field}[{i}]", rules, budget)


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def check_attachment(block: Attachment, field: str, rules: AttachmentRules,
                     budget: Budget) -> None:
    """Check one image or document block (see the module docstring); ``field`` names it."""
    _check_media_type(block, field)
    if isinstance(block, DocumentContent):
        _check_name(block.name, f"{field}.name")
    if block.url is not None:
        if block.data is not None:
            raise _invalid(field, "give data or url, not both")
        _check_url(block.url, f"{field}.url", rules.allow_private)
    _check_model_takes(block, field, rules)
    if block.url is None:
        _check_data(block, field, rules, budget)


def _check_media_type(block: Attachment, field: str) -> None:
    mime = block.mime_type
    if isinstance(block, ImageContent):
        if mime is None and block.url is None:
            raise _invalid(f"{field}.mime_type", "required with data (image/png, image/jpeg, "
                           "image/gif or image/webp)")
        if mime is not None and mime not in IMAGE_TYPES:
            raise _invalid(f"{field}.mime_type", "must be one of " + ", ".join(
                sorted(IMAGE_TYPES)))
    elif mime not in DOCUMENT_TYPES:
        raise _invalid(f"{field}.mime_type", "must be one of " + ", ".join(
            sorted(DOCUMENT_TYPES)))


def _check_name(name: str | None, field: str) -> None:
    if name is None:
        return
    if not name.strip() or len(name) > NAME_MAX:
        raise _invalid(field, f"must be 1 to {NAME_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise _invalid(field, "must hold no control characters")


def _check_url(url: str, field: str, allow_private: bool) -> None:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise _invalid(field, f"not a URL ({exc})") from exc
    if parsed.scheme != "https" or not parsed.host:
        raise _invalid(field, "must be an https:// URL")
    if parsed.userinfo:
        raise _invalid(field, "must not hold credentials")
    host = parsed.host.lower()
    reason = literal_reason(host, allow_private)
    if reason is None and not allow_private and (host == "localhost"
                                                  or host.endswith(".localhost")):
        reason = "a loopback name"
    if reason is not None:
        raise _invalid(field, f"{host} is {reason}: attachments come from public addresses")


def _check_model_takes(block: Attachment, field: str, rules: AttachmentRules) -> None:
    takes = rules.takes
    if isinstance(block, ImageContent) and not takes.images:
        what, where = "images", field
    elif isinstance(block, DocumentContent) and block.mime_type not in takes.documents:
        what, where = f"{block.mime_type} documents", field
    elif block.url is not None and not takes.urls:
        what, where = "attachments by URL (send the bytes as data)", f"{field}.url"
    else:
        return
    raise ApiError(400, "unsupported_attachment", f"{where}: model {rules.model!r} cannot "
                   f"take {what}; it takes {takes.describe()}", where)


def _check_data(block: Attachment, field: str, rules: AttachmentRules, budget: Budget) -> None:
    try:
        raw = decode(block.data or "")
    except ValueError:
        raw = b""
    if not raw:
        raise _invalid(f"{field}.data", "must be non-empty base64 (or give url)")
    if len(raw) > rules.block_max:
        raise ApiError(413, "attachment_too_large", f"{field}: {len(raw)} bytes, more than "
                       f"the {rules.block_max} one attachment may hold "
                       "(AGENTLOOP_ATTACHMENT_MAX_BYTES)", field)
    budget.used += len(raw)
    if budget.used > rules.request_max:
        raise ApiError(413, "attachment_too_large", f"{field}: the request's attachments "
                       f"pass {rules.request_max} bytes together "
                       "(AGENTLOOP_ATTACHMENT_REQUEST_MAX_BYTES)", field)
    if isinstance(block, DocumentContent) and block.mime_type in TEXT_TYPES:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(f"{field}.data", f"a {block.mime_type} document must be UTF-8 "
                           "text") from exc
