"""Detached background processes with pid files: how the launcher runs services."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def spawn_detached(argv: list[str], env: dict[str, str], log_path: Path) -> int:
    """Start ``argv`` in its own session, output appended to ``log_path``; return its pid.

    posix_spawn rather than Popen: the process outlives its starter, and a Popen object for
    a child nobody waits on only produces ResourceWarnings.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    return os.posix_spawnp(
        argv[0],
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log_path), flags, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,  # not killed by the terminal's ^C; stopped by `down`
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def read_pid(path: Path) -> int | None:
    """The pid in ``path`` if that process is alive."""
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def terminate(pid: int, timeout_s: float = 20.0) -> None:
    """SIGTERM, wait, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
