"""A workspace file whose name is not UTF-8 (made by ``run_shell``, or left in a thread's
shared workspace) is listed by ``list_files`` with U+FFFD where the bytes were, and the run
completes on each backend: the name once made the run's events unencodable and failed it."""

from __future__ import annotations

from providers.fake import text, tool_calls
from tests.api.conftest import Api
from tests.support.sse_client import open_stream


async def test_a_file_name_that_is_not_utf8_is_listed_and_the_run_completes(api: Api) -> None:
    api.fake.script = [tool_calls(("run_shell", {"command": "touch \"$(printf 'caf\\351.txt')\""})),
                       tool_calls(("list_files", {})), text("done")]
    run = await api.create(input="list")
    ended = await api.wait_status(run["id"], "completed", "failed", within=30)
    assert (ended["status"], ended["result"]) == ("completed", "done"), ended
    listed = []
    async with open_stream(api.client, run["events_url"]) as stream:
        async for frame in stream:
            if frame.event == "tool_execution_end" and frame.data["tool_name"] == "list_files":
                listed.append(frame.data["result"]["content"][0]["text"])
            elif frame.event == "agent_end":
                break
    assert listed == ["caf\ufffd.txt"]
