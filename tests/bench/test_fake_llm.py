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


def test_answer_n_keeps_the_tool_call_and_sizes_the_answer(base_url: str) -> None:
    """``answer=N``: the same two calls, the answer N text deltas (``bench/instructions.py``)."""
    first = [{"role": "user", "content": "add 2 and 3 answer=3"}]
    picked = _stream(base_url, first)
    assert picked[-1]["choices"][0]["finish_reason"] == "tool_calls"
    then = [*first, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    for n in (0, 3):
        then[0]["content"] = f"add 2 and 3 answer={n}"
        chunks = _stream(base_url, then)
        texts = [c["choices"][0]["delta"].get("content") for c in chunks[:-1]]
        assert len(texts) == n and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_non_stream_and_models(base_url: str) -> None:
    resp = httpx.post(f"{base_url}/chat/completions",
                      json={"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 2,
                                                                                      "b": 3}
    models = httpx.get(f"{base_url}/models").json()
    assert models["data"][0]["id"] == "fake-model"


def test_https_paced_frames_carry_their_write_time(tmp_path: Path) -> None:
    """The production-path fake: TLS from a throw-away CA, one frame per ``delay``, each text
    delta past the first words stamped with ``time.monotonic()``; connections counted."""
    import time

    from bench._tls import client_context, make_tls

    tls = make_tls(tmp_path)
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--delay-ms", "10",
                             "--tls-cert", str(tls.cert), "--tls-key", str(tls.key)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        body = {"model": "fake-model", "stream": True,
                "messages": [{"role": "user", "content": "stream deltas=20"}]}
        arrivals: list[tuple[float, str]] = []
        with httpx.Client(verify=client_context(tls)) as client:
            url = f"https://127.0.0.1:{port}"
            t0 = time.monotonic()
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: {"):
                        delta = json.loads(line[6:])["choices"][0]["delta"]
                        arrivals.append((time.monotonic(), delta.get("content") or ""))
            stats = client.get(f"{url}/stats").json()
        texts = [t for _, t in arrivals if t]
        assert len(texts) == 20 and "".join(texts[:8]) == "The sum of 2 and 3 is 5."
        stamped = [(at, int(t.split("@")[1]) / 1e6) for at, t in arrivals if "@" in t]
        assert len(stamped) == 12
        assert all(0 <= at - sent < 5 for at, sent in stamped)  # written before it arrived
        sent = [s for _, s in stamped]
        assert sent == sorted(sent) and sent[-1] - t0 >= 19 * 0.010 - 0.003  # paced, never early
        assert stats["connections"] == 1 and stats["requests"] == 1
    finally:
        proc.terminate()
        proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
