"""Where code runs: inside bubblewrap when it is usable, else bare (only if the operator says so).

``sandbox_mode()`` decides, for ``/readyz`` and the start-up log as much as for the menu:

- ``"bubblewrap"``: ``bwrap`` ran ``true`` in the exact sandbox we use (probed once). Code sees a
  read-only ``/usr`` (and the ``/bin``, ``/lib*`` links), a few files of ``/etc``, the workspace
  read-write at its own path, a private ``/tmp``, minimal ``/proc`` and ``/dev``, no network, its
  own PID namespace (killing bwrap kills everything in it) and no capabilities.
- ``"unsafe"``: bwrap is unusable but ``settings.unsafe_code_tools`` is on: code runs bare in the
  workspace, still with the scrubbed environment, the limits and the uid drop below.
- ``"disabled"``: neither, or the start-up probe (``probe.probe_code_tools``: one real
  program run the way the tools run it) failed; the code tools' ``check_fn`` keeps them off
  every menu.

In every mode code gets a scrubbed environment (``sandbox_env``: no provider keys, no
``AGENTLOOP_*``), its own session and process group, and ``prlimit`` limits (CPU, address
space, file size, processes). RLIMIT_NPROC counts tasks per real uid and is not enforced for
root, so a root service runs code as ``settings.sandbox_uid`` (bwrap then runs unprivileged in a
user namespace): a fork bomb meets the cap and dies with its process group at the timeout. The
cap is shared by every code process running under that uid at the same time. A non-root service
cannot drop uid: the cap is raised by the service's own thread count, and the service's other
processes count against it.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tool_registry.builtin.settings import BuiltinSettings, MiB, current

log = logging.getLogger(__name__)

SandboxMode = Literal["bubblewrap", "unsafe", "disabled"]

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf",
        "localtime", "alternatives", "mime.types")


def sandbox_env(ws: Path) -> dict[str, str]:
    """The whole environment code sees: an allow-list, nothing inherited from the service."""
    return {"PATH": SANDBOX_PATH, "HOME": str(ws), "PWD": str(ws), "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp", "USER": "sandbox",
            "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}


def bwrap_args(ws: Path) -> list[str]:
    """The bubblewrap command line (up to the ``--``) for a workspace. The private ``/tmp`` is
    a tmpfs of ``settings.tmp_size_mb``: without a size it could fill the host's memory.

    No ``--new-session``: the sandbox must stay in the process group that ``_proc`` kills.
    bwrap's ``--new-session`` moves its PID-namespace init into a new session before that init
    arms its parent-death signal, so a group kill landing in between killed bwrap but left the
    sandbox running (seen under load). In our group, one ``killpg`` reaches the init whenever
    it lands, and the init's death takes the whole namespace along, even processes that called
    ``setsid`` themselves. What ``--new-session`` guards against (``TIOCSTI`` input injected
    into the caller's terminal) cannot happen here: every spawn gets a session of its own with
    no controlling terminal (``start_new_session``) and no terminal descriptor."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
            "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/", name)
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    etc = [f"/etc/{n}" for n in _ETC] + sorted(glob.glob("/etc/python3*"))
    for path in etc:
        args += ["--ro-bind-try", path, path]
    tmp_bytes = current().tmp_size_mb * MiB
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
             "--bind", str(ws), str(ws), "--chdir", str(ws)]
    return args


def limit_args(settings: BuiltinSettings, room: int | None = None) -> list[str]:
    """The ``prlimit`` prefix applying the resource limits (inherited by bwrap and the code);
    ``room``: bytes left in the workspace, which no file written may exceed."""
    nproc = settings.max_processes
    if os.geteuid() != 0:
        nproc += len(os.listdir("/proc/self/task"))
    fsize = settings.file_size_mb * MiB if room is None else min(settings.file_size_mb * MiB,
                                                                   room)
    return ["prlimit", f"--cpu={settings.cpu_seconds}",
            f"--as={settings.address_space_mb * MiB}",
            f"--fsize={fsize}", f"--nproc={nproc}", "--"]


def drop_args(settings: BuiltinSettings) -> list[str]:
    """The ``setpriv`` prefix running code as the sandbox uid when we are root (else none).

    A command prefix, not Popen's ``user``/``group`` arguments: uvloop (the service's event
    loop) rejects those, and a prefix behaves the same on every loop and in the probe."""
    if os.geteuid() != 0:
        return []
    uid = settings.sandbox_uid
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


@dataclass(slots=True, frozen=True)
class ProbeResult:
    """What the start-up probe saw (``/readyz`` shows it as ``sandbox_probe``)."""

    ok: bool
    """The program ran and printed what it was asked to."""
    mode: SandboxMode
    """The mode the probe ran in."""
    detail: str
    """What happened, in a sentence (the error when it failed)."""
    seconds: float


_probe: ProbeResult | None = None


def record_probe(result: ProbeResult | None) -> None:
    """Remember the probe's result (None: forget it, as if none had run)."""
    global _probe
    _probe = result


def probe_result() -> ProbeResult | None:
    """The last probe's result, if a probe ran in this process."""
    return _probe


@dataclass(slots=True)
class Launch:
    """How to start one code process: argv and environment."""

    argv: list[str]
    env: dict[str, str]
    mode: SandboxMode = "bubblewrap"


def prepare(command: list[str], ws: Path, room: int | None = None) -> Launch:
    """Wrap ``command`` for the current mode; ``RuntimeError`` when code tools are disabled.
    ``room``: bytes left under the workspace cap (None: no cap)."""
    settings = current()
    mode = sandbox_mode()
    if mode == "disabled":
        raise RuntimeError("code execution is disabled on this server: bubblewrap is not "
                           "usable and unsafe code tools are not enabled")
    wrapper = [*bwrap_args(ws), "--"] if mode == "bubblewrap" else []
    return Launch(argv=limit_args(settings, room) + drop_args(settings) + wrapper + command,
                  env=sandbox_env(ws), mode=mode)


@functools.cache
def bwrap_usable() -> bool:
    """Whether bwrap runs ``true`` in our sandbox here (probed once; see ``reset_probe``)."""
    if not (shutil.which("bwrap") and shutil.which("prlimit") and shutil.which("setpriv")):
        log.warning("sandbox: bwrap, prlimit or setpriv not found on PATH")
        return False
    settings = current()
    with tempfile.TemporaryDirectory(prefix="agentloop-probe-") as tmp:
        ws = Path(tmp)
        ws.chmod(0o755)
        argv = limit_args(settings) + drop_args(settings) + bwrap_args(ws) + ["--", "true"]
        try:
            done = subprocess.run(argv, env=sandbox_env(ws), capture_output=True, timeout=10,
                                  check=False, start_new_session=True)  # as code runs
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("sandbox: bwrap probe failed to start: %s", exc)
            return False
    if done.returncode != 0:
        log.warning("sandbox: bwrap probe exited %s: %s", done.returncode,
                    done.stderr.decode(errors="replace").strip())
    return done.returncode == 0


def reset_probe() -> None:
    """Forget the bwrap probe result (tests; after installing bubblewrap)."""
    bwrap_usable.cache_clear()


def sandbox_mode() -> SandboxMode:
    """How code tools would run right now."""
    if _probe is not None and not _probe.ok:
        return "disabled"
    if bwrap_usable():
        return "bubblewrap"
    can_drop = os.geteuid() != 0 or shutil.which("setpriv")
    if current().unsafe_code_tools and shutil.which("prlimit") and can_drop:
        return "unsafe"
    return "disabled"


def code_tools_available() -> bool:
    """``check_fn`` of the code tools: offered unless the mode is ``disabled``."""
    return sandbox_mode() != "disabled"
