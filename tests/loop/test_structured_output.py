"""Structured output in the loop (``app.engine.output``): the final answer held to the run's
response format, one corrective retry, ``output_invalid``; tools and the round cap."""

from __future__ import annotations

import re

import pytest

from app import runtime
from app.engine import LoopConfig
from app.engine.events import AgentEnd, json_bytes
from app.engine.output import CORRECTIVE, OutputCheck, format_from_option, parse_output
from providers import fake
from providers.base import ResponseFormat
from providers.messages import AssistantMessage, TextContent, UserMessage
from tests.loop.helpers import Run, drive

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
FMT = ResponseFormat(name="weather", schema=SCHEMA)
GOOD = '{"city": "Paris", "temp": 21.5}'


def config(**kw: object) -> LoopConfig:
    return LoopConfig(model="m", response_format=FMT, **kw)  # type: ignore[arg-type]


def end_of(run: Run) -> AgentEnd:
    end = run.events[-1]
    assert isinstance(end, AgentEnd)
    return end


async def test_a_valid_first_answer_is_the_output() -> None:
    run = await drive([fake.text(GOOD, chunks=3)], config=config())
    assert run.outcome.stop_reason == "stop" and run.outcome.error is None
    assert run.outcome.output == {"city": "Paris", "temp": 21.5}
    assert run.outcome.result == GOOD
    assert end_of(run).output == {"city": "Paris", "temp": 21.5}
    assert b'"output":{"city":"Paris","temp":21.5}' in json_bytes(end_of(run))
    assert run.provider.requests[0].response_format == FMT
    assert run.provider.calls == 1


async def test_no_format_no_output_and_agent_end_leaves_it_out() -> None:
    run = await drive([fake.text("plain")])
    assert run.outcome.output is None
    assert b'"output"' not in json_bytes(end_of(run))
    assert run.provider.requests[0].response_format is None


async def test_an_invalid_answer_gets_one_corrective_message_then_counts() -> None:
    run = await drive([fake.text('{"city": "Paris"}'), fake.text(GOOD)], config=config())
    assert run.outcome.stop_reason == "stop"
    assert run.outcome.output == {"city": "Paris", "temp": 21.5}
    second = run.sent(1)
    assert [m.role for m in second] == ["user", "assistant", "user"]
    corrective = second[2]
    assert isinstance(corrective, UserMessage) and isinstance(corrective.content, str)
    assert corrective.content.startswith(f'{CORRECTIVE} "weather":\n- $.temp: required\n')
    assert corrective.content.endswith('"additionalProperties":false}')
    assert [m.role for m in run.outcome.messages] == ["user", "assistant", "user", "assistant"]
    starts = [e for e in run.events if e.type == "message_start"
              and e.message.role == "user"]
    assert len(starts) == 2  # the prompt and the corrective message, both in the log
    assert [e.type for e in run.events].count("turn_start") == 2


async def test_invalid_twice_ends_output_invalid() -> None:
    run = await drive([fake.text("Sure! It is sunny."), fake.text('{"city": 3, "temp": 1}')],
                      config=config())
    assert run.outcome.stop_reason == "output_invalid"
    assert run.outcome.output is None
    assert run.outcome.error == ('the final answer does not match the response format '
                                 '"weather" after one corrective retry: $.city: expected '
                                 'string, got integer')
    assert run.outcome.result == '{"city": 3, "temp": 1}'
    first_problem = run.sent(1)[2].content
    assert isinstance(first_problem, str) and "- not JSON (" in first_problem
    end = end_of(run)
    assert end.stop_reason == "output_invalid" and end.output is None
    assert run.provider.calls == 2


async def test_tools_run_before_the_final_answer_and_stay_on_the_menu() -> None:
    run = await drive([fake.tool_calls(("add", {"a": 2, "b": 3})), fake.text("5"),
                       fake.tool_calls(("add", {"a": 20, "b": 1.5}), arg_chunks=1),
                       fake.text(GOOD)], config=config())
    assert run.outcome.stop_reason == "stop" and run.outcome.output["temp"] == 21.5
    assert all(r.response_format == FMT and r.tools for r in run.provider.requests)
    third = run.sent(2)  # the corrective message came after the tool round's answer "5"
    assert [m.role for m in third] == ["user", "assistant", "tool_result", "assistant", "user"]


async def test_a_fenced_answer_is_taken() -> None:
    run = await drive([fake.text(f"```json\n{GOOD}\n```")], config=config())
    assert run.outcome.output == {"city": "Paris", "temp": 21.5}


async def test_the_retry_counts_against_max_iterations() -> None:
    run = await drive([fake.text("nope"), fake.text(GOOD)], config=config(max_iterations=1))
    assert run.outcome.stop_reason == "output_invalid"
    assert "max_iterations left no round to ask again: not JSON" in run.outcome.error
    assert run.provider.calls == 1
    run = await drive([fake.text("nope"), fake.text(GOOD)], config=config(max_iterations=2))
    assert run.outcome.stop_reason == "stop" and run.provider.calls == 2


async def test_max_iterations_during_tools_has_no_output() -> None:
    run = await drive([fake.tool_calls(("add", {"a": 1, "b": 2}))], config=config(
        max_iterations=1))
    assert run.outcome.stop_reason == "max_iterations"
    assert run.outcome.output is None and end_of(run).output is None


async def test_a_follow_up_answer_is_held_to_the_format_too() -> None:
    run = Run(fake.FakeProvider([fake.text(GOOD), fake.text("x"),
                                 fake.text('{"city": "Oslo", "temp": -3}')]))
    run.follow_up.push("and Oslo?")
    run = await drive([], config=config(), run=run)
    assert run.outcome.stop_reason == "stop"
    assert run.outcome.output == {"city": "Oslo", "temp": -3}
    assert run.provider.calls == 3  # the second answer got its own retry


def test_format_from_option_and_parse() -> None:
    option = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA,
                                                     "strict": True, "description": None}}
    assert format_from_option(option) == ResponseFormat(name="weather", schema=SCHEMA,
                                                        strict=True)
    assert format_from_option({"type": "text", "json_schema": None}) is None
    assert format_from_option(None) is None
    assert parse_output("  ", FMT) == (None, ["the reply has no text: expected one JSON value"])
    assert parse_output(GOOD, FMT) == ({"city": "Paris", "temp": 21.5}, [])


def test_a_resumed_run_knows_its_retry_is_spent() -> None:
    check = OutputCheck(FMT)
    reply = AssistantMessage(content=[TextContent(text="bad")])
    problems = check.judge(reply)
    prompt = UserMessage(content="hi")
    fresh = OutputCheck(FMT)
    fresh.resumed([prompt, reply, check.corrective(problems), reply])
    assert fresh.retried
    fresh.resumed([prompt, reply])
    assert not fresh.retried


async def test_runtime_exec_takes_response_format_and_returns_output() -> None:
    option = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
    p = fake.FakeProvider([fake.text("no"), fake.text(GOOD)])
    out = await runtime.exec("weather?", provider=p, toolset="none", response_format=option)
    assert out.stop_reason == "stop" and out.output == {"city": "Paris", "temp": 21.5}
    assert p.requests[0].response_format == FMT
    bad = await runtime.exec("weather?", provider=fake.FakeProvider([fake.text("no")],
                                                                    repeat=True),
                             toolset="none", response_format=FMT)
    assert bad.stop_reason == "output_invalid" and bad.output is None
    plain = await runtime.exec("hi", provider=fake.FakeProvider([fake.text("hey")]),
                               toolset="none", response_format={"type": "text"})
    assert plain.output is None and plain.text == "hey"


@pytest.mark.parametrize(("option", "says"), [
    ({"type": "json_object"}, "response_format must be"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format must be"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}},
     "at /type: the top level must be an object schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA | {
        "additionalProperties": True}, "strict": True}},
     "strict mode needs additionalProperties: false on every object (or set strict: false)"),
])
async def test_runtime_exec_refuses_a_format_it_cannot_hold(option: dict, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        await runtime.exec("x", provider=fake.FakeProvider([fake.text("{}")]),
                           toolset="none", response_format=option)
