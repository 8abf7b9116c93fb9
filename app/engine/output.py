"""Structured output: a run's final answer held to its response format.

Only the final answer is constrained: the rounds that pick tools run as always. When the model
answers in text (no tool call) and no queued message keeps the run going, the loop asks
``OutputCheck.judge``: the text (one JSON value; a single code fence around it is tolerated) is
parsed and validated against the schema (``tool_registry.json_validate``). Valid: it is the
run's ``output``. Invalid the first time: the model gets one corrective user message (below)
and answers again, tools still on its menu; that round counts against ``max_iterations``.
Invalid again, or no round left under the cap: the run ends ``output_invalid``. A valid answer
makes the next final answer (after a follow-up) start over with its own retry.

What the model reads after an invalid answer (``corrective``)::

    Your last reply is not a valid final answer for the response format "<name>":
    - $.city: required
    - $.temp: expected number, got string
    Reply again with only the corrected JSON value (no text before or after it, no code
    fence), matching this JSON Schema:
    <the schema as compact JSON>
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from providers.base import ResponseFormat
from providers.messages import AssistantMessage, Message, UserMessage
from tool_registry.json_schema import SchemaProblem, check_schema, strict_problem
from tool_registry.json_validate import validate

CORRECTIVE = "Your last reply is not a valid final answer for the response format"
"""How the corrective message opens (a resumed run recognises one it already sent)."""
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*)\n\s*```$", re.S)
_SHOWN = 5
"""Problems quoted in the run's error."""


def format_from_option(value: Mapping[str, Any] | ResponseFormat | None) -> ResponseFormat | None:
    """The run option ``response_format`` (OpenAI's shape, as stored) as a ``ResponseFormat``;
    None for no format (unset, or ``{"type": "text"}``)."""
    if value is None or isinstance(value, ResponseFormat):
        return value
    if value.get("type") != "json_schema":
        return None
    spec = value["json_schema"]
    return ResponseFormat(name=str(spec["name"]), schema=dict(spec["schema"]),
                          strict=bool(spec.get("strict") or False),
                          description=spec.get("description"))


def check_format(fmt: ResponseFormat) -> None:
    """``SchemaProblem`` (a ``ValueError``) for a schema agentloop cannot hold answers to (see
    ``tool_registry.json_schema``), or a ``strict`` one that is not strict-compatible: the
    schema is never rewritten to fit."""
    check_schema(fmt.schema)
    if fmt.strict:
        problem = strict_problem(fmt.schema)
        if problem is not None:
            raise SchemaProblem(problem.pointer, f"{problem.problem} (or set strict: false)")


def parse_output(text: str, fmt: ResponseFormat) -> tuple[Any, list[str]]:
    """``(the parsed value, its problems)``: no problems means a valid final answer."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        return None, ["the reply has no text: expected one JSON value"]
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return None, [f"not JSON ({exc})"]
    return value, validate(fmt.schema, value)


@dataclass(slots=True)
class OutputCheck:
    """One run's response format and where its final answers stand."""

    fmt: ResponseFormat
    retried: bool = False
    """The corrective message was sent for the current final answer."""
    value: Any = None
    """The last valid final answer, parsed."""

    def judge(self, reply: AssistantMessage) -> list[str]:
        """The problems of ``reply`` as the final answer; none: it is the output."""
        value, problems = parse_output(reply.text(), self.fmt)
        if not problems:
            self.value, self.retried = value, False
        return problems

    def corrective(self, problems: list[str]) -> UserMessage:
        """The message that asks the model once more (see the module docstring)."""
        self.retried = True
        listed = "\n".join(f"- {p}" for p in problems)
        schema = orjson.dumps(self.fmt.schema).decode()
        return UserMessage(content=f'{CORRECTIVE} "{self.fmt.name}":\n{listed}\nReply again '
                           "with only the corrected JSON value (no text before or after it, "
                           f"no code fence), matching this JSON Schema:\n{schema}")

    def failure(self, problems: list[str], *, capped: bool) -> str:
        """The ``error`` of a run that ends ``output_invalid``."""
        shown = "; ".join(problems[:_SHOWN]) + ("; …" if len(problems) > _SHOWN else "")
        why = ("and max_iterations left no round to ask again" if capped
               else "after one corrective retry")
        return (f'the final answer does not match the response format "{self.fmt.name}" '
                f"{why}: {shown}")

    def resumed(self, messages: list[Message]) -> None:
        """A resumed run: its retry is spent when the last user message it added is the
        corrective one."""
        users = [m for m in messages if isinstance(m, UserMessage)]
        last = users[-1].content if users else None
        self.retried = isinstance(last, str) and last.startswith(CORRECTIVE)
