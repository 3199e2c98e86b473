"""A local single-node Apache Kafka broker (KRaft, transactions on), no Docker.

The broker's jars are resolved from Maven Central with the machine's Maven into
``compose/kafka-libs`` (see ``compose/pom.xml``), once; afterwards start works offline.
Data, configuration and logs live under ``<home>/broker``::

    <home>/broker/server.properties   generated on every start from the settings
    <home>/broker/log4j2.properties   broker logging: file appender, no console noise
    <home>/broker/data/               KRaft metadata and topic logs (formatted on first start)
    <home>/broker/logs/server.log     the broker's log; its tail is printed on a failed start
    <home>/broker/broker.pid          the running broker's pid

``tickwheel broker start|stop|status`` is idempotent: start when running and stop when
stopped are no-ops with a message. A broken start (port taken, Java missing, jars missing)
exits non-zero with the reason and the log tail.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tickwheel.procs import alive, spawn_detached
from tickwheel.settings import Settings, load

COMPOSE_DIR = Path(__file__).resolve().parent.parent / "compose"
DEFAULT_LIBS_DIR = COMPOSE_DIR / "kafka-libs"
_MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"


class BrokerError(Exception):
    """The broker could not be resolved, started or reached; the message says why."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    home: Path
    port: int = 9092
    controller_port: int = 9093
    heap: str = "1g"
    libs_dir: Path = DEFAULT_LIBS_DIR
    pom: Path = COMPOSE_DIR / "pom.xml"

    @classmethod
    def from_settings(cls, settings: Settings) -> BrokerConfig:
        return cls(
            home=settings.home.resolve(),
            port=settings.broker_port,
            controller_port=settings.controller_port,
            heap=settings.broker_heap,
        )

    @property
    def root(self) -> Path:
        return self.home / "broker"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "logs" / "server.log"

    @property
    def out_path(self) -> Path:
        return self.root / "logs" / "server.out"

    @property
    def pid_path(self) -> Path:
        return self.root / "broker.pid"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    log_path: Path


def server_properties(cfg: BrokerConfig) -> str:
    """The broker configuration: one combined broker+controller node on loopback."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{cfg.controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{cfg.port},CONTROLLER://127.0.0.1:{cfg.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{cfg.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(cfg.data_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # A single node: internal topics must not ask for more replicas than exist.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "false",
        # Tests join and leave groups constantly; do not wait 3 s for more members.
        "group.initial.rebalance.delay.ms": "0",
        "transaction.max.timeout.ms": "900000",
        # Transactions of a fenced or killed producer are aborted by the coordinator after
        # their timeout; check often so recovery tests do not wait for the default minute.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "log.cleaner.enable": "true",
        "log.segment.bytes": str(64 * 1024 * 1024),
        "log.retention.check.interval.ms": "60000",
        "delete.topic.enable": "true",
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


def log4j2_properties(cfg: BrokerConfig) -> str:
    """Broker logging to a file, so a failed start can show its tail."""
    return "\n".join(
        [
            "status = error",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {cfg.log_path}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.kafka.name = kafka",
            "logger.kafka.level = INFO",
            "logger.state.name = state.change.logger",
            "logger.state.level = WARN",
            "",
        ]
    )


class LocalBroker:
    """Resolve, format, start, probe and stop one local broker."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.cfg = cfg

    # -- jars -------------------------------------------------------------------------

    def ensure_jars(self) -> Path:
        """Resolve the broker jars with Maven unless the pom's set is already present."""
        marker = self.cfg.libs_dir / ".pom-sha256"
        wanted = hashlib.sha256(self.cfg.pom.read_bytes()).hexdigest()
        if marker.exists() and marker.read_text().strip() == wanted:
            return self.cfg.libs_dir
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(
                f"the broker jars are missing from {self.cfg.libs_dir} and Maven ('mvn') is "
                "not on PATH to resolve them"
            )
        if self.cfg.libs_dir.exists():
            shutil.rmtree(self.cfg.libs_dir)
        argv = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(self.cfg.pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={self.cfg.libs_dir}",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
        if done.returncode != 0 or not any(self.cfg.libs_dir.glob("kafka_2.13-*.jar")):
            tail = (done.stdout + done.stderr).strip().splitlines()[-20:]
            raise BrokerError("resolving the broker jars with Maven failed:\n" + "\n".join(tail))
        marker.write_text(wanted + "\n")
        return self.cfg.libs_dir

    # -- process ----------------------------------------------------------------------

    def status(self) -> BrokerStatus:
        pid = self._live_pid()
        return BrokerStatus(pid is not None, pid, self.cfg.bootstrap, self.cfg.log_path)

    def start(self, timeout_s: float = 120.0) -> bool:
        """Start the broker and wait until it serves transactions. False if already running."""
        if self._live_pid() is not None:
            return False
        java = shutil.which("java")
        if java is None:
            raise BrokerError("Java is not on PATH; the broker needs Java 17 or newer")
        for port in (self.cfg.port, self.cfg.controller_port):
            if _port_in_use(port):
                raise BrokerError(f"port {port} on 127.0.0.1 is already in use by another process")
        libs = self.ensure_jars()
        self._write_config()
        self._format_once(java, libs)
        self._launch(java, libs)
        self._wait_ready(timeout_s)
        return True

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker gracefully (SIGTERM, then SIGKILL). False if it was not running."""
        pid = self._live_pid()
        if pid is None:
            return False
        _signal(pid, signal.SIGTERM)
        if not _wait_exit(pid, timeout_s):
            _signal(pid, signal.SIGKILL)
            _wait_exit(pid, 10.0)
        self.cfg.pid_path.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the broker (fault injection): no clean shutdown, no flush."""
        pid = self._live_pid()
        if pid is not None:
            _signal(pid, signal.SIGKILL)
            _wait_exit(pid, 10.0)
        self.cfg.pid_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 30) -> str:
        chunks: list[str] = []
        for path in (self.cfg.out_path, self.cfg.log_path):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(chunks) or "(no broker log yet)"

    def _live_pid(self) -> int | None:
        try:
            pid = int(self.cfg.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def _write_config(self) -> None:
        (self.cfg.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.cfg.root / "server.properties").write_text(server_properties(self.cfg))
        (self.cfg.root / "log4j2.properties").write_text(log4j2_properties(self.cfg))

    def _format_once(self, java: str, libs: Path) -> None:
        if (self.cfg.data_dir / "meta.properties").exists():
            return
        # A leading "-" would be parsed as an option by the storage tool; Kafka's own
        # random-uuid never produces one either.
        cluster_id = "k" + base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")[1:]
        argv = [
            java,
            *self._jvm_flags(heap="256m"),
            "-cp",
            f"{libs}/*",
            _STORAGE_TOOL,
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.cfg.root / "server.properties"),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise BrokerError("formatting KRaft storage failed:\n" + (done.stdout + done.stderr))

    def _jvm_flags(self, heap: str) -> list[str]:
        return [
            f"-Xmx{heap}",
            f"-Xms{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.cfg.root / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.cfg.root / 'logs'}",
        ]

    def _launch(self, java: str, libs: Path) -> None:
        argv = [
            java,
            *self._jvm_flags(self.cfg.heap),
            "-cp",
            f"{libs}/*",
            _MAIN_CLASS,
            str(self.cfg.root / "server.properties"),
        ]
        pid = spawn_detached(argv, dict(os.environ), self.cfg.out_path)
        self.cfg.pid_path.write_text(f"{pid}\n")

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if self._live_pid() is None:
                raise BrokerError(f"the broker exited during start-up:\n{self.log_tail()}")
            if not _port_in_use(self.cfg.port):
                time.sleep(0.2)  # not listening yet; probing now would only log refusals
                continue
            try:
                _run_async(probe_transactions(self.cfg.bootstrap))
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)
                continue
            return
        self.kill()
        raise BrokerError(
            f"the broker did not become ready in {timeout_s:.0f} s ({last_error}):\n{self.log_tail()}"
        )


async def probe_transactions(bootstrap: str) -> None:
    """Ready means: metadata answers and a transactional producer can initialise."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"tickwheel.probe.{uuid.uuid4().hex}",
        request_timeout_ms=5_000,
        metadata_max_age_ms=5_000,
    )
    try:
        await asyncio.wait_for(producer.start(), timeout=10)
    finally:
        await producer.stop()


def _run_async(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return not alive(pid)


def free_port() -> int:
    """An ephemeral loopback port that is free right now (for test brokers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- CLI ------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("broker", help="start, stop or inspect the local Kafka broker")
    parser.add_argument("action", choices=("start", "stop", "status", "resolve"))
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.cli import CliError

    broker = LocalBroker(BrokerConfig.from_settings(load()))
    try:
        return _cli_action(broker, args.action)
    except BrokerError as exc:
        raise CliError(str(exc)) from exc


def _cli_action(broker: LocalBroker, action: str) -> int:
    cfg = broker.cfg
    if action == "resolve":
        print(f"broker jars in {broker.ensure_jars()}")
    elif action == "start":
        started = broker.start()
        state = "started" if started else "already running"
        print(f"broker {state} on {cfg.bootstrap} (pid {broker.status().pid}); log: {cfg.log_path}")
    elif action == "stop":
        print("broker stopped" if broker.stop() else "broker was not running")
    else:
        status = broker.status()
        if not status.running:
            print(f"broker not running (would listen on {cfg.bootstrap}); log: {cfg.log_path}")
            return 3
        print(f"broker running on {cfg.bootstrap} (pid {status.pid}); log: {cfg.log_path}")
    return 0
