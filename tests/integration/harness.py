"""Harness for processor tests: a fresh topic set, processor subprocesses, and a history checker.

A test gets an isolated Tickwheel deployment on the suite's broker (its own topic prefix,
app id and home directory), starts processors as real processes so they can be SIGKILLed or
SIGSTOPped, and checks the committed log with :func:`check_runs`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.kafka_util import read_all, unique
from tickwheel.client import CommandClient
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CommandMeta,
    CreateJob,
    ExecutorSpec,
    JobSpec,
    OneTime,
    RunDue,
)
from tickwheel.settings import Settings
from tickwheel.topics import create_topics


@dataclass
class Deployment:
    """One isolated Tickwheel deployment on the shared test broker."""

    settings: Settings
    home: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    async def create(
        cls, bootstrap: str, tmp_path: Path, partitions: int = 3, **overrides: Any
    ) -> Deployment:
        name = unique("tw")
        settings = Settings(
            bootstrap_servers=bootstrap,
            topic_prefix=f"{name}.",
            partitions=partitions,
            app_id=name,
            home=tmp_path / "home",
            **overrides,
        )
        await create_topics(settings)
        return cls(settings, tmp_path / "home")

    def env(self, **extra: str) -> dict[str, str]:
        s = self.settings
        values = {
            "TICKWHEEL_BOOTSTRAP_SERVERS": s.bootstrap_servers,
            "TICKWHEEL_TOPIC_PREFIX": s.topic_prefix,
            "TICKWHEEL_PARTITIONS": str(s.partitions),
            "TICKWHEEL_APP_ID": s.app_id,
            "TICKWHEEL_HOME": str(s.home),
            "TICKWHEEL_LOOKAHEAD_MS": str(s.lookahead_ms),
            "TICKWHEEL_TICK_MS": str(s.tick_ms),
            "TICKWHEEL_TRANSACTION_TIMEOUT_MS": str(s.transaction_timeout_ms),
            "TICKWHEEL_MAX_FIRES_PER_STEP": str(s.max_fires_per_step),
            "TICKWHEEL_LOG_LEVEL": "INFO",
        }
        return {**os.environ, **values, **extra}

    def start_processor(self, home: Path | None = None, **env: str) -> subprocess.Popen[bytes]:
        """Start ``tickwheel processor`` as a child process (optionally with failpoints armed)."""
        extra = dict(env)
        if home is not None:
            extra["TICKWHEEL_HOME"] = str(home)
        log_path = self.home / f"processor-{len(self.processes)}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tickwheel.cli", "processor"],
                env=self.env(**extra),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in sorted(self.home.glob("processor-*.log"))
        )


def one_time_spec(at_ms: int, team: str = "team-a", **overrides: Any) -> JobSpec:
    return JobSpec(team=team, name="job", schedule=OneTime(at_ms), executor=ExecutorSpec("noop"), **overrides)


def create_command(job_id: str, spec: JobSpec) -> CreateJob:
    meta = CommandMeta(command_id=f"c-{job_id}", job_id=job_id, issued_at_ms=now_ms(), principal="test")
    return CreateJob(meta, spec)


async def submit(settings: Settings, commands: Iterable[Any]) -> None:
    async with CommandClient(settings, principal="test") as client:
        batch = list(commands)
        for start in range(0, len(batch), 2_000):
            await client.submit_many(batch[start : start + 2_000])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def committed_runs(settings: Settings) -> list[Any]:
    """Every record of ``runs`` that read_committed sees, decoded, with its offset."""
    records = await read_all(settings.bootstrap_servers, settings.topic("runs"))
    return [(r.partition, r.offset, mappers.run_event_from_bytes(r.value)) for r in records]


async def wait_for_run_dues(settings: Settings, expected: int, timeout_s: float = 120) -> list[RunDue]:
    """Poll ``runs`` until at least ``expected`` RunDue are committed (or time out)."""
    deadline = time.monotonic() + timeout_s
    dues: list[RunDue] = []
    while time.monotonic() < deadline:
        dues = [e for _, _, e in await committed_runs(settings) if isinstance(e, RunDue)]
        if len(dues) >= expected:
            return dues
        await asyncio.sleep(1.0)
    return dues


@dataclass(frozen=True)
class RunCheck:
    """What the committed ``runs`` log says about a set of expected run ids."""

    lost: set[str]
    duplicates: dict[tuple[str, int], int]
    unexpected: set[str]


def check_runs(dues: Iterable[RunDue], expected_run_ids: set[str]) -> RunCheck:
    """Lost = expected but never dispatched; duplicate = (run_id, attempt) committed twice."""
    counts = Counter((d.run_id, d.attempt) for d in dues)
    seen = {run_id for run_id, _ in counts}
    return RunCheck(
        lost=expected_run_ids - seen,
        duplicates={key: n for key, n in counts.items() if n > 1},
        unexpected=seen - expected_run_ids,
    )
