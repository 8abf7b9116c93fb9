"""A workspace file whose name is not UTF-8 (made by ``run_shell``, or left in a thread's
shared workspace) is listed by ``list_files`` with U+FFFD where the bytes were, and the run
completes on each backend: the name once made the run's events unencodable and failed it."""

from __future__ import annotations

import asyncio
import time

from providers.fake import text, tool_calls
from tests.api.conftest import Api


async def test_a_file_name_that_is_not_utf8_is_listed_and_the_run_completes(api: Api) -> None:
    api.fake.script = [tool_calls(("run_shell", {"command": "touch \"$(printf 'caf\\351.txt')\""})),
                       tool_calls(("list_files", {})), text("done")]
    created = await api.client.post("/runs", json={"input": "list"})
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    deadline = time.monotonic() + 30
    while (run := (await api.client.get(f"/runs/{run_id}")).json())["status"] not in (
            "completed", "failed"):
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)
    assert (run["status"], run["result"]) == ("completed", "done"), run
    body = b""
    async with api.client.stream("GET", f"/runs/{run_id}/events") as stream:
        async for chunk in stream.aiter_bytes():
            body += chunk
            if b"event: agent_end" in body:
                break
    listed = [line for line in body.split(b"\n")
              if b'"tool_name":"list_files"' in line and b"tool_execution_end" in line]
    assert len(listed) == 1 and "caf\ufffd.txt".encode() in listed[0], body[-2000:]
