"""RunRecord ⇄ Redis hash: one field per attribute, values JSON (ints stay plain digits, so
scripts can HINCRBY ``attempt`` and ``last_seq``). Extra fields (``job``, ``cancel``,
``token``) belong to the scripts: ``cancel`` is read as ``cancel_requested``, never written."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from app.store.records import RunRecord

_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord)) - {"cancel_requested"}


def encode_fields(fields: dict[str, Any]) -> dict[str | bytes, bytes]:
    """Attribute values as hash values."""
    unknown = set(fields) - _FIELDS
    if unknown:
        raise ValueError(f"not RunRecord fields: {sorted(unknown)}")
    return {name: orjson.dumps(value) for name, value in fields.items()}


def encode_record(record: RunRecord) -> dict[str | bytes, bytes]:
    """The whole record as a hash mapping."""
    return encode_fields({name: getattr(record, name) for name in _FIELDS})


def decode_record(raw: dict[bytes, bytes]) -> RunRecord | None:
    """The record of an HGETALL reply (None when the hash is missing)."""
    if not raw:
        return None
    values = {k.decode(): orjson.loads(v) for k, v in raw.items() if k.decode() in _FIELDS}
    if "id" not in values:
        return None
    return RunRecord(**values, cancel_requested=b"cancel" in raw)


def pairs(raw: Any) -> dict[bytes, bytes]:
    """An HGETALL reply as a dict: redis-py's dict, or RESP2's flat list of fields and values."""
    if isinstance(raw, dict):
        return raw
    return dict(zip(raw[::2], raw[1::2], strict=True))
