"""The tool-call loop of ``shared/seed/tool-call-loop.zh.md`` and its vocabulary: no HTTP, no
storage, no worker.

``loop`` reads top to bottom (rounds, picks, queues, termination); ``loop_config`` holds its
settings and its result; ``streaming`` turns one model call into events; ``tool_exec`` runs one
picked function; ``history`` repairs the conversation before every model call. Its
vocabulary: ``events`` (loop → client), ``queues`` (steering and follow-up), ``approvals`` (the
gate that decides which picks wait for a person). ``resume``, ``resume_point`` and ``nested``
read what a run's log says when a run goes on after a lost worker or a parking (through a
reader the store satisfies, never the store itself).
"""

from app.engine.loop import ABORTED_TOOL, AgentLoop, run_loop
from app.engine.loop_config import LoopConfig, LoopOutcome
from app.engine.resume_point import Resume

__all__ = ["ABORTED_TOOL", "AgentLoop", "LoopConfig", "LoopOutcome", "Resume", "run_loop"]
