"""runtime.exec outside the service gets what the service has: its tools, its model resolver
(profiles, provider factory), its defaults (max_tokens, run timeout); tool modules import from
the working directory, and a module that cannot be imported is one line (issue 9, 14–16)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app import runtime
from app.engine import LoopConfig, run_loop
from providers import fake
from providers.base import Provider
from providers.fake import FakeProvider
from providers.messages import ToolResultMessage, UserMessage
from tests.loop.helpers import registry_with
from tests.support.wire_server import Reply, WireServer
from tool_registry import ToolModuleError, build_menu, function, import_tool_modules

BIN = Path(sys.executable).parent


def chat(*deltas: str, finish: str | None = "stop") -> list[bytes]:
    chunks = [b"data: " + json.dumps({"model": "m", "choices": [
        {"index": 0, "delta": {"content": d}}]}).encode() + b"\n\n" for d in deltas]
    if finish:
        chunks.append(b"data: " + json.dumps({"choices": [
            {"index": 0, "delta": {}, "finish_reason": finish}]}).encode() + b"\n\n")
        chunks.append(b"data: [DONE]\n\n")
    return chunks


def clean_env(**extra: str) -> dict[str, str]:
    """The process environment without agentloop or provider settings, plus ``extra``."""
    keys = ("AGENTLOOP_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "AWS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(keys)}
    return {**env, **extra}


def run_script(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python bin/script.py`` with the working directory ``tmp_path`` (a plain script)."""
    script = tmp_path / "bin" / "script.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=clean_env(**env))


# -- 16: one resolver ------------------------------------------------------------------------

async def test_a_profile_model_works_in_runtime_exec_as_over_http(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with WireServer() as server:
        monkeypatch.setenv("AGENTLOOP_OPENAI_PROFILES",
                           json.dumps({"myprofile": {"base_url": server.url + "/v1"}}))
        server.replies.append(Reply(chunks=chat("hello ", "there")))
        out = await runtime.exec("hi", model="myprofile:m", toolset="none")
    assert (out.stop_reason, out.text) == ("stop", "hello there"), out.error
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.json["model"] == "m"
    assert sent.json["max_tokens"] == 8192  # AGENTLOOP_DEFAULT_MAX_TOKENS (a profile's field)


def factory() -> Callable[[str], tuple[Provider, str]]:
    """``AGENTLOOP_PROVIDER_FACTORY`` target: every model is a scripted fake."""
    FACTORY_MODELS.clear()

    def resolve(spec: str) -> tuple[Provider, str]:
        FACTORY_MODELS.append(spec)
        return FakeProvider([fake.text("from the factory")]), spec.partition(":")[2]

    return resolve


FACTORY_MODELS: list[str] = []


async def test_the_provider_factory_serves_runtime_exec_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_PROVIDER_FACTORY", f"{__name__}:factory")
    out = await runtime.exec("hi", model="anything:m", toolset="none")
    assert out.text == "from the factory" and FACTORY_MODELS == ["anything:m"]


async def test_a_nested_exec_naming_a_model_uses_its_runs_resolver() -> None:
    asked: list[str] = []

    def resolve(spec: str) -> tuple[Provider, str]:
        asked.append(spec)
        return FakeProvider([fake.text("inner")]), spec.partition(":")[2]

    @function(register=False)
    async def delegate() -> str:
        """Asks another model."""
        return str((await runtime.exec("go", model="svc-only:m2", toolset="none")).text)

    outer = FakeProvider([fake.tool_calls(("delegate", {})), fake.text("outer")])
    out = await run_loop(provider=outer, menu=build_menu(registry=registry_with(delegate)),
                         config=LoopConfig(model="m", resolve=resolve), context=[],
                         emit=lambda e: None, prompts=[UserMessage(content="hi")])
    assert asked == ["svc-only:m2"]
    result = next(m for m in out.messages if isinstance(m, ToolResultMessage))
    assert result.content[0].text == "inner"  # type: ignore[union-attr]


# -- 15: defaults for max_tokens and the deadline, at the wire --------------------------------

async def test_max_tokens_default_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    async with WireServer() as server:
        monkeypatch.setenv("AGENTLOOP_OPENAI_PROFILES",
                           json.dumps({"p": {"base_url": server.url + "/v1"}}))
        monkeypatch.setenv("AGENTLOOP_DEFAULT_MAX_TOKENS", "0")
        server.replies += [Reply(chunks=chat("a")), Reply(chunks=chat("b"))]
        await runtime.exec("hi", model="p:m", toolset="none")
        await runtime.exec("hi", model="p:m", toolset="none", max_tokens=55)
    assert "max_tokens" not in server.requests[0].json
    assert server.requests[1].json["max_tokens"] == 55


async def test_a_server_that_never_stops_streaming_is_cut_at_the_run_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    endless = Reply(chunks=chat(*["word "] * 20_000, finish=None), delay=0.005)
    async with WireServer() as server:
        monkeypatch.setenv("AGENTLOOP_OPENAI_PROFILES",
                           json.dumps({"llama": {"base_url": server.url + "/v1"}}))
        monkeypatch.setenv("AGENTLOOP_RUN_TIMEOUT", "0.5")
        server.replies.append(endless)
        updates: list[object] = []
        started = time.monotonic()
        out = await runtime.exec("tell me a story", model="llama:small", toolset="none",
                                 on_event=lambda e: updates.append(e) if e.type ==
                                 "message_update" else None)
    assert time.monotonic() - started < 30  # 20 000 words at 5 ms would take 100 s
    assert out.stop_reason == "error"
    assert out.error == ("run timed out: it passed its deadline of 0.5 s (the run's timeout) "
                         "and was stopped")
    assert updates  # it was streaming when the deadline passed


# -- the service's tool gating and limits apply to runtime.exec as well ---------------------

async def test_operator_disabled_tools_stay_off_runtime_menus_nested_ones_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_DISABLED_TOOLS", "list_files,read_file")
    inner = FakeProvider([fake.text("inner")])

    @function(register=False)
    async def delegate() -> str:
        """Opens a nested loop asking for the full toolset."""
        return str((await runtime.exec("go", provider=inner, toolset="full")).text)

    top = FakeProvider([fake.text("plain")])
    await runtime.exec("hi", provider=top)
    outer = FakeProvider([fake.tool_calls(("delegate", {})), fake.text("outer")])
    await runtime.exec("hi", provider=outer, tools=[delegate])
    offered = {t.name for t in top.requests[0].tools} | {t.name for t in inner.requests[0].tools}
    assert "write_file" in offered  # the built-ins are there…
    assert not offered & {"list_files", "read_file"}  # …but not the disabled ones


async def test_the_tool_timeout_setting_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_TOOL_TIMEOUT", "0.2")

    @function(register=False)
    async def stall() -> str:
        """Never answers in time."""
        await asyncio.sleep(30)
        return "late"

    p = FakeProvider([fake.tool_calls(("stall", {})), fake.text("ok")])
    out = await runtime.exec("hi", provider=p, tools=[stall])
    result = next(m for m in out.messages if isinstance(m, ToolResultMessage))
    assert result.is_error and result.content[0].text == "Tool stall timed out after 0.2 s"  # type: ignore[union-attr]


# -- 14: tools on by default in a plain script; tool modules from the working directory -------

def test_a_plain_script_gets_the_builtin_tools(tmp_path: Path) -> None:
    done = run_script(tmp_path, """
        import asyncio
        from app import runtime
        out = asyncio.run(runtime.exec('please list_files "*"', model="demo:echo"))
        print(out.text)
    """, AGENTLOOP_WORKSPACE=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "The tool `list_files` returned" in done.stdout


def test_tool_modules_are_found_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(textwrap.dedent('''
        from tool_registry import function

        @function
        def shout(text: str) -> str:
            """Shout the text."""
            return text.upper() + "!"
    '''))
    done = run_script(tmp_path, """
        import asyncio
        from app import runtime
        out = asyncio.run(runtime.exec('please shout "hey"', model="demo:echo"))
        print(out.text)
    """, AGENTLOOP_TOOL_MODULES="mytools")
    assert done.returncode == 0, done.stderr
    assert "The tool `shout` returned:\nHEY!" in done.stdout


def test_import_tool_modules_looks_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the ``agentloop`` console script ``sys.path`` holds its bin directory, not the
    working directory."""
    (tmp_path / "cwd_tools_x1.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_tools_x1", raising=False)
    assert import_tool_modules(["cwd_tools_x1"]) == ["cwd_tools_x1"]
    assert sys.modules["cwd_tools_x1"].VALUE == 1
    sys.modules.pop("cwd_tools_x1")


@pytest.mark.parametrize(("source", "expect"), [
    (None, "ModuleNotFoundError: No module named 'broken_tools_x2'"),
    ("import os\nVALUE = undefined_name\n", "NameError: name 'undefined_name' is not defined ("),
    ("def f(:\n", "SyntaxError: "),
])
def test_a_module_that_cannot_be_imported_is_one_readable_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str | None,
        expect: str) -> None:
    if source is not None:
        (tmp_path / "broken_tools_x2.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the working directory joins it
    monkeypatch.delitem(sys.modules, "broken_tools_x2", raising=False)
    with pytest.raises(ToolModuleError) as caught:
        import_tool_modules(["broken_tools_x2"])
    message = str(caught.value)
    assert "\n" not in message and expect in message
    assert message.startswith("cannot import tool module 'broken_tools_x2' "
                              "(AGENTLOOP_TOOL_MODULES): ")
    if source is not None:
        assert "broken_tools_x2.py, line " in message


def test_the_service_refuses_to_start_with_one_line_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "bad_tools.py").write_text("raise RuntimeError('no database')\n")
    done = subprocess.run([str(BIN / "agentloop"), "serve", "--port", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=clean_env(AGENTLOOP_TOOL_MODULES="bad_tools",
                                        AGENTLOOP_LOG_FORMAT="json"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "agentloop: cannot import tool module 'bad_tools' (AGENTLOOP_TOOL_MODULES): "
        f"RuntimeError: no database ({tmp_path / 'bad_tools.py'}, line 1)"]
