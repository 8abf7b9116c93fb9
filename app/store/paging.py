"""Listing runs and threads: the filters and the opaque cursors both backends use.

A cursor is ``<created_at>|<id>`` of the last item shown; the next page starts after it in
newest-first order. The API checks a cursor's shape before a backend sees it.
"""

from __future__ import annotations

from app.store.records import RunRecord
from app.store.thread_records import ThreadRecord


def matches(record: RunRecord | ThreadRecord, status: str | None, metadata: dict[str, str],
            owner: str | None = None) -> bool:
    """Whether a run (or a thread) passes the list filters (``owner``: an end user's own)."""
    if status is not None and record.status != status:
        return False
    if owner is not None and record.owner != owner:
        return False
    return all(record.metadata.get(k) == v for k, v in metadata.items())


def make_cursor(record: RunRecord | ThreadRecord) -> str:
    """The opaque cursor after ``record``."""
    return f"{record.created_at!r}|{record.id}"


def parse_cursor(cursor: str | None) -> tuple[float, str] | None:
    """``make_cursor`` reversed (None: from the newest, or a cursor of another shape)."""
    if not cursor:
        return None
    created, _, item_id = cursor.partition("|")
    try:
        return float(created), item_id
    except ValueError:
        return None
