"""Fault injectors: processes to SIGKILL or SIGSTOP, a broker to kill, a disk to fill, a clock.

* :class:`Fleet` starts processors, workers and gateways of one deployment as real child
  processes (``python -m tickwheel.cli processor`` / ``python -m tickwheel.workers.cli`` /
  ``python -m tickwheel.cli gateway``), so a fault is a real signal: SIGKILL (no clean-up
  at all), SIGSTOP/SIGCONT (a zombie that wakes up after its session and transaction
  timeouts passed).
* :class:`OwnBroker` is a second broker on free loopback ports under the test's tmp_path,
  for scenarios that SIGKILL or partition the broker; the suite's shared broker is never
  touched. Its listeners can add an address outside loopback (the veth of ``netns.py``).
* :func:`tmpfs` mounts a small tmpfs for RocksDB (a full disk gives real ENOSPC).
* :class:`JumpClock` is the injected clock of an in-process ``Processor``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.harness import Deployment
from tickwheel.localbroker import BrokerConfig, LocalBroker, free_port, server_properties
from tickwheel.settings import Settings

# -- processes ------------------------------------------------------------------------------


@dataclass
class Member:
    """One child process of the fleet."""

    name: str
    role: str  # "processor" | "worker" | "gateway"
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Fleet:
    """The processors and workers of one deployment, as child processes."""

    deployment: Deployment
    members: list[Member] = field(default_factory=list)
    prefix: tuple[str, ...] = ()  # argv prefix, e.g. ("ip", "netns", "exec", NS) for a namespace
    kills: int = 0

    @property
    def home(self) -> Path:
        return self.deployment.home

    def processor(self, name: str, *, home: Path | None = None, **env: str) -> Member:
        """Start ``tickwheel processor`` with its own state dir (``home``) and extra env."""
        extra = {"TICKWHEEL_HOME": str(home or self.home / name), **env}
        return self._spawn(name, "processor", [sys.executable, "-m", "tickwheel.cli", "processor"], extra)

    def worker(self, name: str, **env: str) -> Member:
        """Start a worker of pool ``default`` that may call the local target (SSRF allow-list)."""
        extra = {
            "TICKWHEEL_WORKER_WORKER_ID": f"{name}-{len(self.members)}",
            "TICKWHEEL_WORKER_SSRF_ALLOW": "127.0.0.1",
            "TICKWHEEL_WORKER_SHUTDOWN_GRACE_MS": "1000",
            "TICKWHEEL_WORKER_KILL_GRACE_MS": "500",
            **env,
        }
        argv = [sys.executable, "-m", "tickwheel.workers.cli", "--pool", "default"]
        return self._spawn(name, "worker", argv, extra)

    def gateway(
        self, name: str, port: int, *, home: Path | None = None, env: Mapping[str, str] | None = None
    ) -> Member:
        """Start ``tickwheel gateway`` on 127.0.0.1:``port`` with extra ``env`` (its tokens); its
        embedded read model lives in ``home`` (default ``<home>/gateway``), so a restart on the
        same home resumes its fold."""
        extra = {"TICKWHEEL_HOME": str(home or self.home / "gateway"), **(env or {})}
        argv = [sys.executable, "-m", "tickwheel.cli", "gateway", "--host", "127.0.0.1", "--port", str(port)]
        return self._spawn(name, "gateway", argv, extra)

    def _spawn(self, name: str, role: str, argv: list[str], env: dict[str, str]) -> Member:
        log_path = self.home / "logs" / f"{len(self.members):02d}-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [*self.prefix, *argv],
                env=self.deployment.env(**{**settings_env(self.deployment.settings), **env}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        member = Member(name, role, proc, log_path)
        self.members.append(member)
        return member

    def live(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role and m.alive]

    def kill(self, member: Member) -> None:
        """SIGKILL: no flush, no leave-group, no abort; the next owner must clean up."""
        with contextlib.suppress(ProcessLookupError):
            member.proc.send_signal(signal.SIGCONT)
            member.proc.kill()
        member.proc.wait(timeout=20)
        self.kills += 1

    def kill_random(self, role: str, rng: random.Random) -> Member | None:
        live = self.live(role)
        if not live:
            return None
        victim = rng.choice(live)
        self.kill(victim)
        return victim

    def stop_all(self) -> None:
        """SIGTERM everything still alive (SIGCONT first for zombies), SIGKILL stragglers."""
        for member in self.members:
            if member.alive:
                with contextlib.suppress(ProcessLookupError):
                    member.proc.send_signal(signal.SIGCONT)
                    member.proc.terminate()
        for member in self.members:
            try:
                member.proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()

    def logs(self, tail: int = 3_000) -> str:
        return "\n".join(
            f"--- {m.log_path.name} (rc={m.proc.returncode}) ---\n"
            + m.log_path.read_text(errors="replace")[-tail:]
            for m in self.members
            if m.log_path.exists()
        )


def settings_env(settings: Settings) -> dict[str, str]:
    """``TICKWHEEL_*`` variables for every setting that differs from its default."""
    env: dict[str, str] = {}
    for name, spec in Settings.model_fields.items():
        value = getattr(settings, name)
        if value is not None and value != spec.default:
            env[f"TICKWHEEL_{name.upper()}"] = str(value)
    return env


def pause(member: Member) -> None:
    """SIGSTOP: the process keeps its sockets and its open transaction but does nothing."""
    member.proc.send_signal(signal.SIGSTOP)


def resume(member: Member) -> None:
    member.proc.send_signal(signal.SIGCONT)


# -- a broker of the test's own -------------------------------------------------------------


class OwnBroker(LocalBroker):
    """A :class:`LocalBroker` on free loopback ports, optionally also listening on ``extra_host``.

    With ``extra_host`` the broker has a second listener ``EXTERNAL`` on that address (the
    veth of a network namespace) at ``extra_port``, advertised as itself, so clients in the
    namespace stay on it while the test's own clients use loopback.
    """

    def __init__(self, home: Path, *, extra_host: str | None = None, heap: str = "512m") -> None:
        port, controller = stable_port(), stable_port()
        super().__init__(BrokerConfig(home=home, port=port, controller_port=controller, heap=heap))
        self.extra_host = extra_host
        self.extra_port = stable_port() if extra_host else 0

    @property
    def bootstrap(self) -> str:
        return self.cfg.bootstrap

    @property
    def external_bootstrap(self) -> str:
        assert self.extra_host is not None
        return f"{self.extra_host}:{self.extra_port}"

    def _write_config(self) -> None:
        super()._write_config()
        if self.extra_host is None:
            return
        props = server_properties(self.cfg)
        extra = {
            "listeners": f",EXTERNAL://{self.external_bootstrap}",
            "advertised.listeners": f",EXTERNAL://{self.external_bootstrap}",
            "listener.security.protocol.map": ",EXTERNAL:PLAINTEXT",
        }
        lines = [line + extra.get(line.partition("=")[0], "") for line in props.splitlines()]
        (self.cfg.root / "server.properties").write_text("\n".join(lines) + "\n")

    def restart(self, timeout_s: float = 120) -> float:
        """SIGKILL the broker and start it again on the same data; seconds until ready."""
        self.kill()
        started = time.monotonic()
        # The killed JVM's sockets outlive its pid for a moment; start() refuses a busy port.
        while _port_busy(self.cfg.port) or _port_busy(self.cfg.controller_port):
            if time.monotonic() - started > 30:
                break
            time.sleep(0.2)
        self.start(timeout_s)
        return time.monotonic() - started


def _port_busy(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def stable_port() -> int:
    """A free loopback port *below* the ephemeral range.

    A restarted broker must get its port back. An ephemeral port (what ``free_port`` returns)
    may meanwhile be taken as the local end of some client's connection, or even by a
    client's reconnect to it connecting to itself (TCP simultaneous open) while nothing listens.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12_000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


@contextlib.contextmanager
def own_broker(home: Path, *, extra_host: str | None = None) -> Iterator[OwnBroker]:
    broker = OwnBroker(home, extra_host=extra_host)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(timeout_s=20)


# -- a small disk ----------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (e.g. ``"4m"``) at ``path`` for the block (root only)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def can_mount() -> str | None:
    """Why a tmpfs cannot be mounted here, or None if it can."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    return None


def fill(path: Path) -> int:
    """Write a file until the file system is full (ENOSPC); returns the bytes written."""
    written = 0
    with (path / "ballast").open("wb") as ballast:
        chunk = b"\0" * 65_536
        try:
            while True:
                ballast.write(chunk)
                ballast.flush()
                written += len(chunk)
        except OSError:
            pass
    return written


def unfill(path: Path) -> None:
    (path / "ballast").unlink(missing_ok=True)


# -- time -------------------------------------------------------------------------------------


class JumpClock:
    """Wall-clock milliseconds plus an offset that a test moves forwards or backwards."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def jump(self, delta_ms: int) -> None:
        self.offset_ms += delta_ms
