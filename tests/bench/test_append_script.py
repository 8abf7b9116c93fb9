"""bench/append_script.py: the APPEND script measured inside a real redis-server writes what
the backend's does (one seq per call, the note published) and the CPU figure is read."""

from __future__ import annotations

import redis

from bench import append_script
from bench._procs import ROOT, start_redis


def test_a_round_writes_one_event_per_call_and_reads_the_servers_cpu() -> None:
    server = start_redis()
    try:
        client = redis.Redis(port=server.port)
        pubsub = redis.Redis(port=server.port).pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(append_script.CHANNEL)
        assert pubsub.get_message(timeout=5) is not None  # the subscription itself
        sha = client.script_load(append_script.script_of(ROOT))
        calls = 2 * append_script.RUNS
        us, seqs = append_script.one_round(client, server.popen.pid, sha, calls)
        assert us > 0
        # last_seq starts at 1 (a real create writes run_created), then one seq per call
        assert seqs == [3] * append_script.RUNS
        assert client.xlen(append_script._keys(0)[1]) == 2
        note = pubsub.get_message(timeout=5)
        assert note is not None and note["data"].startswith(b"e:run_0:2:2\n2\tmessage_update")
        pubsub.close()
        client.close()
    finally:
        server.stop()


def test_the_same_tree_twice_measures_alike() -> None:
    summary = append_script.measure({"this": ROOT, "base": ROOT}, rounds=1, calls=600)
    assert float(summary["this"]) > 0 and float(summary["base"]) > 0  # type: ignore[arg-type]
    assert 0 < float(summary["ratio"]) < 10  # type: ignore[arg-type]
