"""``app.approvals.gate.Decision``, as documented before (the gate lives in
``app.engine.approvals``)."""

from __future__ import annotations

from app.engine.approvals import Ask, Decision, WaitingCall

__all__ = ["Ask", "Decision", "WaitingCall"]
