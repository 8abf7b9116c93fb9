"""@microsoft/fetch-event-source (Node, the version package-lock.json pins) against a live
server: what the library hands its ``onmessage`` for our frames.

The library dispatches a message at every blank line, whatever the block held, so a
``: ping\\n\\n`` keep-alive reached ``onmessage`` as ``{data: ""}`` and a page's ``JSON.parse``
threw. Our only blank lines end blocks with ``data:`` (``app/delivery/sse.py``). After the end, a
reconnect is ``204``, which the documented ``onopen`` turns into a clean stop.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from providers import fake
from tests.api.conftest import Api

HERE = Path(__file__).parent
SCRIPT = HERE / "fetch_event_source.mjs"


async def fetch_event_source(url: str, last_event_id: str | None = None) -> dict[str, Any]:
    """Run the Node script on ``url``; its JSON report."""
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / "@microsoft" / "fetch-event-source").is_dir():
        pytest.fail("node or tests/js/node_modules missing: `make test` installs both (npm ci)")
    args = [str(SCRIPT), url, *([last_event_id] if last_event_id else [])]
    proc = await asyncio.create_subprocess_exec(node, *args, cwd=HERE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)  # type: ignore[no-any-return]


async def test_every_message_has_json_data_and_a_reconnect_after_the_end_stops(
        api: Api) -> None:
    """On both backends (on Redis the stream opens from what the create wrote: its first
    frame carries ``retry`` all the same). Pings every 0.2 s; the model pauses 0.25 s."""
    api.fake.script = [fake.text("one two", chunks=2, delay=0.25)]
    run = await api.create(tools=[])
    got = await fetch_event_source(api.url + run["events_url"])
    assert got["status"] == [200] and got["end"] == "closed"
    messages = got["messages"]
    assert [m for m in messages if not m["data"]] == []
    parsed = [json.loads(m["data"]) for m in messages]
    assert [m["id"] for m in messages] == [str(n) for n in range(1, len(messages) + 1)]
    assert [m["event"] for m in messages] == [p["type"] for p in parsed]
    assert parsed[-1]["type"] == "agent_end" and parsed[-1]["depth"] == 0
    assert messages[0]["retry"] == 1000
    assert [m["retry"] for m in messages[1:]] == [None] * (len(messages) - 1)

    again = await fetch_event_source(api.url + run["events_url"], messages[-1]["id"])
    assert again == {"status": [204], "messages": [], "end": "204"}
    middle = await fetch_event_source(api.url + run["events_url"], messages[-3]["id"])
    assert [m["id"] for m in middle["messages"]] == [m["id"] for m in messages[-2:]]
    assert middle["end"] == "closed" and all(m["data"] for m in middle["messages"])
