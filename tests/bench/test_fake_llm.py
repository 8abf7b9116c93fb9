"""Smoke test of bench/fake_llm.py: a real subprocess on a free port, both scripted answers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

FAKE = Path(__file__).resolve().parents[2] / "bench" / "fake_llm.py"
pytestmark = pytest.mark.timeout(10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        proc.terminate()
        proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def _stream(base_url: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    body = {"model": "fake-model", "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        data = [ln[6:] for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    for raw in data[:-1]:
        chunk = json.loads(raw)
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"] and chunk["model"] == "fake-model"
        chunks.append(chunk)
    usage = chunks.pop()
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in chunks)
    return chunks


def test_tool_call_stream(base_url: str) -> None:
    chunks = _stream(base_url, [{"role": "user", "content": "add 2 and 3"}])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "add"
    assert len(calls) > 2 and all(tc["index"] == 0 for tc in calls)
    args = "".join(tc["function"]["arguments"] for tc in calls)
    assert json.loads(args) == {"a": 2, "b": 3}
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "tool_calls"


def test_text_stream_after_tool_result(base_url: str) -> None:
    messages = [{"role": "user", "content": "add 2 and 3"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    chunks = _stream(base_url, messages)
    texts = [c["choices"][0]["delta"].get("content") for c in chunks[:-1]]
    assert len(texts) == 40 and all(isinstance(t, str) and t for t in texts)
    assert "".join(texts).startswith("The sum of 2 and 3 is 5.")
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_non_stream_and_models(base_url: str) -> None:
    resp = httpx.post(f"{base_url}/chat/completions",
                      json={"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 2,
                                                                                      "b": 3}
    models = httpx.get(f"{base_url}/models").json()
    assert models["data"][0]["id"] == "fake-model"
