"""How each benchmarked system is installed and started against the fake LLM.

- ``agentloop`` / ``agentloop-redis``: this checkout, ``agentloop serve`` (its CLI module run
  directly), the memory backend or a throw-away redis-server whose CPU and memory count as
  the system's.
- ``langgraph``: LangGraph Server (``langgraph dev``, in-memory runtime) in its own virtualenv
  under bench/.peer/, serving bench/peer_langgraph/agent.py (the prebuilt ReAct agent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench._procs import ROOT, Proc, free_port, start, start_redis, wait_http

PEER = ROOT / "bench" / ".peer"
PEER_VENV = PEER / "venv"
PEER_APP = PEER / "app"  # a copy of bench/peer_langgraph: langgraph dev writes state beside it
# Pinned so that a re-run measures the same peer; bump together and re-measure.
PEER_REQUIREMENTS = ["langgraph-cli[inmem]==0.4.40", "langgraph-api==0.16.7",
                     "langgraph==1.2.24", "langgraph-prebuilt==1.1.3",
                     "langchain-openai==1.7.4", "langchain-core==1.8.3"]
PEER_JOBS_PER_WORKER = 10  # `langgraph dev` runs one run at a time without it; 10 was its best
AGENTLOOP_SYSTEMS = ("agentloop", "agentloop-redis")
FLOOR = "relay-floor"
"""``bench/relay_floor.py`` on the production path: the least any Python server spends on
the run (https only: it has no micro-benchmark cell)."""
SYSTEMS = (*AGENTLOOP_SYSTEMS, "langgraph", FLOOR)
QUIET_ENV = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
             "LANGSMITH_TRACING_V2": "false", "LANGCHAIN_TRACING_V2": "false",
             "LANGCHAIN_TRACING": "false", "LANGSMITH_API_KEY": "", "LANGCHAIN_API_KEY": "",
             "DO_NOT_TRACK": "1", "LANGGRAPH_NO_BROWSER": "1"}


def _base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")
    return {k: v for k, v in os.environ.items() if k in keep}


def ensure_peer() -> None:
    """Create bench/.peer/venv and install the pinned peer (skipped when already done)."""
    marker = PEER_VENV / "bench-requirements.txt"
    wanted = "\n".join(PEER_REQUIREMENTS) + "\n"
    if marker.is_file() and marker.read_text() == wanted:
        return
    PEER.mkdir(parents=True, exist_ok=True)
    if not (PEER_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pip = [str(PEER_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    subprocess.run([*pip, *PEER_REQUIREMENTS], check=True)
    marker.write_text(wanted)


def peer_versions() -> dict[str, str]:
    code = ("import importlib.metadata as m;"
            "print(';'.join(f'{d}={m.version(d)}' for d in ('langgraph', 'langgraph-api', "
            "'langgraph-cli', 'langgraph-runtime-inmem', 'langchain-openai', 'langchain-core')))")
    try:
        out = subprocess.run([str(PEER_VENV / "bin" / "python"), "-c", code], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    return dict(pair.split("=", 1) for pair in out.split(";"))


def agentloop_argv(port: int, root: Path = ROOT) -> list[str]:
    """``agentloop serve`` of the tree at ``root`` (its CLI module run directly, so a checkout
    from before the packages moved serves too), else uvicorn on its app factory."""
    for cli in ("app/process/cli.py", "app/cli.py"):
        if (root / cli).exists():
            module = cli.removesuffix(".py").replace("/", ".")
            return [sys.executable, "-m", module, "serve", "--host", "127.0.0.1", "--port",
                    str(port)]
    return [sys.executable, "-m", "uvicorn", "--factory", "app.process.main:app_factory",
            "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http",
            "httptools", "--log-level", "warning", "--no-access-log"]


def agentloop_env(fake: Proc, root: Path = ROOT) -> dict[str, str]:
    """What every agentloop the benchmarks start runs with: the fake model as its OpenAI
    provider (its private CA trusted the way deployments trust one), the bench tools, the
    tree at ``root``."""
    env = _base_env() | {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": fake.url + "/v1",
                         "AGENTLOOP_DEFAULT_MODEL": "openai:fake-model",
                         "AGENTLOOP_TOOL_MODULES": "bench.bench_tools",
                         "AGENTLOOP_LOG_LEVEL": "WARNING", "PYTHONPATH": str(root)}
    if fake.ca is not None:
        env["SSL_CERT_FILE"] = str(fake.ca)
    return env


def start_agentloop(fake: Proc, *, redis: bool, extra_env: dict[str, str] | None = None,
                    name: str = "agentloop", root: Path = ROOT,
                    processes: int | None = None) -> Proc:
    """agentloop against ``fake``; with ``redis`` a fresh redis-server rides along in ``extra``.
    ``root``: the source tree to serve (another checkout's, for an A/B; this venv runs it).
    ``processes``: ``serve --processes N`` (a supervisor and N children: the Proc's CPU and
    memory are its process tree's, so every child counts); ``None`` leaves the flag out."""
    env = agentloop_env(fake, root)
    redis_proc = start_redis() if redis else None
    if redis_proc is not None:
        env["AGENTLOOP_REDIS_URL"] = f"redis://127.0.0.1:{redis_proc.port}/0"
    env |= extra_env or {}
    port = free_port()
    argv = agentloop_argv(port, root)
    if processes is not None:
        if "serve" not in argv:
            raise ValueError(f"{root} has no agentloop serve CLI: --processes needs one")
        argv += ["--processes", str(processes)]
    proc = start(name, argv, port, env=env, cwd=root)
    if redis_proc is not None:
        proc.extra.append(redis_proc)
    try:
        wait_http(proc, "/healthz", 30)
    except Exception:
        proc.stop()
        raise
    return proc


def start_langgraph(fake: Proc, jobs_per_worker: int = PEER_JOBS_PER_WORKER) -> Proc:
    """``langgraph dev`` without reload, browser, tracing or analytics, on a copy of the graph."""
    shutil.rmtree(PEER_APP, ignore_errors=True)
    shutil.copytree(ROOT / "bench" / "peer_langgraph", PEER_APP)
    env = _base_env() | QUIET_ENV | {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": fake.url + "/v1"}
    if fake.ca is not None:
        env["SSL_CERT_FILE"] = str(fake.ca)
    port = free_port()
    argv = [str(PEER_VENV / "bin" / "langgraph"), "dev", "--host", "127.0.0.1", "--port",
            str(port), "--no-browser", "--no-reload", "--server-log-level", "WARNING",
            "--n-jobs-per-worker", str(jobs_per_worker), "--config", "langgraph.json"]
    proc = start("langgraph", argv, port, env=env, cwd=PEER_APP)
    try:
        wait_http(proc, "/ok", 90)
    except Exception:
        proc.stop()
        raise
    return proc


def start_system(system: str, fake: Proc, peer_jobs: int = PEER_JOBS_PER_WORKER) -> Proc:
    if system == "langgraph":
        return start_langgraph(fake, peer_jobs)
    if system == FLOOR:
        from bench.relay_floor import start_relay

        return start_relay(fake)  # type: ignore[no-any-return]
    return start_agentloop(fake, redis=system == "agentloop-redis")


def remove_peer_state() -> None:
    shutil.rmtree(PEER_APP, ignore_errors=True)

