"""Kept for the import path documented before the engine package existed:
``app.approvals.gate.Decision`` (now ``app.engine.approvals``, also ``runtime.Decision``)."""
