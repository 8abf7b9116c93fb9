"""The built-in tools in a run through the HTTP service, with the scripted ``FakeProvider``.

The model writes a file, reads it back, ``cat``s it with ``run_shell`` (when the sandbox allows
code), lists the workspace and tries a path escape; the test watches the ``tool_execution_end``
events over SSE and checks the file landed in the run's own workspace
(``AGENTLOOP_WORKSPACE_ROOT/<run_id>``). A ``web`` run must not be offered ``run_shell``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import fake
from tests.api.conftest import serve
from tests.support.sse_client import read_all
from tool_registry.builtin import settings as builtin_settings
from tool_registry.builtin.sandbox import sandbox_mode

CONTENT = "hello from e2e ✓\n"
NO_SANDBOX = ("run_shell is not offered: sandbox_mode() is 'disabled' (neither bubblewrap nor "
              "prlimit is usable here)")


@pytest.fixture
def workspace_root() -> Iterator[Path]:
    """A workspace root under the system temp dir that the sandbox uid (65534) can traverse:
    pytest's tmp_path is 0700 (see tests/tools/conftest.py). The service configures the
    built-in tools process-wide, so their settings are restored afterwards."""
    saved = builtin_settings.current()
    base = Path(tempfile.mkdtemp(prefix="agentloop-e2e-"))
    base.chmod(0o755)
    yield base / "workspaces"
    builtin_settings.configure(saved)
    shutil.rmtree(base, ignore_errors=True)


def results(frames: list[Any]) -> dict[str, tuple[str, bool]]:
    """tool_call_id → (result text, is_error) from the ``tool_execution_end`` events."""
    return {f.data["tool_call_id"]: ("".join(c.get("text", "") for c in
                                             f.data["result"]["content"]), f.data["is_error"])
            for f in frames if f.event == "tool_execution_end"}


@pytest.mark.parametrize("with_shell", [True, False], ids=["with-shell", "files-only"])
async def test_file_tools_in_the_runs_workspace(workspace_root: Path, with_shell: bool) -> None:
    async with serve(workspace_root=workspace_root, unsafe_code_tools=True) as api:
        if with_shell and sandbox_mode() == "disabled":
            pytest.skip(NO_SANDBOX)
        steps = [("write_file", {"path": "notes/hello.txt", "content": CONTENT}, "w"),
                 ("read_file", {"path": "notes/hello.txt"}, "r")]
        if with_shell:
            steps.append(("run_shell", {"command": "cat notes/hello.txt"}, "sh"))
        steps += [("list_files", {}, "ls"), ("read_file", {"path": "../../etc/passwd"}, "esc")]
        api.fake.script = [fake.tool_calls(step) for step in steps] + [fake.text("all done")]
        run = await api.create(input="use the tools", tools=sorted({s[0] for s in steps}))
        frames = await read_all(api.client, run["events_url"])
        done = await api.wait_status(run["id"], "completed")

    got = results(frames)
    assert set(got) == {s[2] for s in steps}
    assert got["w"] == (f"wrote {len(CONTENT.encode())} bytes to notes/hello.txt", False)
    assert got["r"] == ("     1\thello from e2e ✓", False)
    assert got["ls"] == ("notes/\nnotes/hello.txt", False)
    escape, is_error = got["esc"]
    assert is_error and "outside the workspace" in escape and "root:" not in escape, escape
    if with_shell:
        text, is_error = got["sh"]
        assert not is_error and CONTENT.strip() in text
    assert (workspace_root / run["id"] / "notes" / "hello.txt").read_text() == CONTENT
    assert frames[-1].event == "agent_end" and frames[-1].data["stop_reason"] == "stop"
    assert done["result"] == "all done"


async def test_a_web_run_is_not_offered_run_shell(workspace_root: Path) -> None:
    async with serve(workspace_root=workspace_root, unsafe_code_tools=True) as api:
        api.fake.script = [fake.text("web"), fake.text("api")]
        web = await api.create(input="hi", tools_source="web")
        await api.wait_status(web["id"], "completed")
        api_run = await api.create(input="hi")
        await api.wait_status(api_run["id"], "completed")
        shell_offered = sandbox_mode() != "disabled"
    web_menu = {t.name for t in api.fake.requests[0].tools}
    api_menu = {t.name for t in api.fake.requests[1].tools}
    assert "run_shell" not in web_menu and "write_file" not in web_menu
    assert "read_file" in web_menu  # the menu is trimmed, not emptied
    assert ("run_shell" in api_menu) == shell_offered  # the same request over "api" gets it
