"""The tool-call loop of ``shared/seed/tool-call-loop.zh.md``: no HTTP, no storage.

``agent`` reads top to bottom (rounds, picks, queues, termination); ``config`` holds its
settings and its result; ``streaming`` turns one model call into events; ``tool_exec`` runs one
picked function; ``history`` repairs the conversation before every model call. The queue
vocabulary it shares with the backends is ``app.engine.queues``.
"""

from app.engine.loop import ABORTED_TOOL, AgentLoop, run_loop
from app.engine.loop_config import LoopConfig, LoopOutcome
from app.engine.resume_point import Resume

__all__ = ["ABORTED_TOOL", "AgentLoop", "LoopConfig", "LoopOutcome", "Resume", "run_loop"]
