"""Request and response bodies of the thread routes (``app/api/routes/threads.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.options import Metadata


class MultitaskOutcome(BaseModel):
    """What a message posted to a thread did (on the Run a thread post returns)."""

    action: Literal["started", "queued", "steered", "interrupted"] = Field(description=(
        "started: this run was created for it (the thread was idle); queued / steered: it "
        "joined this active (or waiting) run as a follow-up / steering message; interrupted: "
        "the active run was cancelled and this run starts when it has ended"))
    queued: bool = Field(description="the message joined a run that already existed (its "
                         "queue, or the input of a run waiting to start), not a run of its own")
    message_ids: list[str] = Field(description="one per message; while queued in a run's "
                                   "queue, `DELETE /runs/{run}/queue/{id}` withdraws it")
    repeat: bool = Field(default=False, description="an Idempotency-Key replay")


class CreateThread(BaseModel):
    """``POST /threads`` body (may be empty)."""

    model_config = ConfigDict(extra="forbid")
    metadata: Metadata = Field(default_factory=dict)


class ThreadSummary(BaseModel):
    """A thread in ``GET /threads``: its state, without its conversation and run list
    (``GET /threads/{id}`` has them)."""

    id: str
    status: Literal["idle", "busy"]
    created_at: str
    updated_at: str
    metadata: dict[str, str]
    run_count: int = Field(description="how many runs the thread has had")
    last_run: str | None = Field(description="the thread's newest run")
    active_run: str | None
    next_run: str | None = Field(description="a run waiting for the active one to end "
                                 "(multitask interrupt)")
    events_url: str
    stream_token: str | None = Field(default=None, description=(
        "a fresh token for this thread's events (`GET /threads/{id}/events?token=`)"))


class Thread(BaseModel):
    """The Thread object."""

    id: str
    status: Literal["idle", "busy"]
    created_at: str
    updated_at: str
    metadata: dict[str, str]
    messages: list[dict[str, Any]] = Field(description=(
        "the whole conversation in order: every ended run's input and additions (cancelled "
        "and failed runs' too), then what the active run added so far"))
    runs: list[str] = Field(description="the thread's runs, oldest first")
    active_run: str | None
    next_run: str | None = Field(description="a run waiting for the active one to end "
                                 "(multitask interrupt)")
    events_url: str
    stream_token: str | None = Field(default=None, description=(
        "a fresh token for this thread's events (`GET /threads/{id}/events?token=`)"))


class ThreadList(BaseModel):
    """``GET /threads``: newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    threads: list[ThreadSummary]
    next_cursor: str | None
