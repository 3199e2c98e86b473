"""The recorder: what a chaos scenario did and what every reader saw, for the checker.

A scenario records, while its faults run:

* every command it submitted and the outcome its client saw (``ok``: acknowledged;
  ``failed``: definitely refused; ``unknown``: no answer, it may or may not be in the log);
* a *concurrent* read_committed tail of ``runs`` and ``job-events``: each record with the
  wall-clock time this reader first saw it, so "acknowledged" has a time, and so that a
  record a read_committed reader saw but the final log lacks is an *aborted read*;

and, once the scenario has quiesced (:meth:`Recorder.finish`):

* a final read_committed scan of every topic the processor reads or writes (the log the
  checker and ``replay verify`` judge), and a read_uncommitted scan of ``runs`` (aborted
  transactions' records are visible there, which shows the faults really aborted some);
* lease records (RunStarted/RunHeartbeat) from ``outcomes``;
* the ledger of the idempotent HTTP target, if the scenario used one.

The result is a frozen :class:`History`; :func:`tests.chaos.checker.check` judges it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.http_target import HttpTarget
from tickwheel.client import CommandClient
from tickwheel.replay.log import DEFAULT_ROLES, LogRecord
from tickwheel.schemas.model import Command
from tickwheel.settings import Settings

SUBMIT_TIMEOUT_S = 10.0
COMMITTED = "read_committed"


class CommandOutcome(StrEnum):
    OK = "ok"  # acknowledged by the log (or the gateway answered 2xx)
    FAILED = "failed"  # definitely not appended (the gateway answered 4xx)
    UNKNOWN = "unknown"  # no answer: it may or may not be in the log


@dataclass(frozen=True, slots=True)
class CommandRecord:
    command: Command
    outcome: CommandOutcome
    at_ms: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Seen:
    """A record a read_committed reader saw during the scenario, and when it first saw it."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    observed_ms: int


@dataclass(frozen=True, slots=True)
class TargetCall:
    """One arrival at the idempotent HTTP target, in wall-clock time."""

    run_id: str | None
    idempotency_key: str | None
    attempt: int | None
    at_ms: int
    applied: bool
    status: int | None


@dataclass(frozen=True)
class History:
    """Everything one scenario recorded; input of the checker."""

    prefix: str
    commands: tuple[CommandRecord, ...]
    concurrent: tuple[Seen, ...]  # read_committed, during the scenario (runs, job-events)
    log: tuple[LogRecord, ...]  # final read_committed scan of every processor topic
    uncommitted_runs: tuple[LogRecord, ...]  # final read_uncommitted scan of runs
    target_calls: tuple[TargetCall, ...] = ()
    projection: Mapping[str, str] | None = None  # job id -> status, as a projection shows it
    started_ms: int = 0
    finished_ms: int = 0

    def topic(self, role: str) -> str:
        return f"{self.prefix}{role}"

    def records(self, role: str) -> list[LogRecord]:
        name = self.topic(role)
        return [r for r in self.log if r.topic == name]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Recorder:
    """Records one scenario against one deployment; see the module docstring."""

    settings: Settings
    principal: str = "chaos"
    commands: list[CommandRecord] = field(default_factory=list)
    seen: dict[tuple[str, int, int], Seen] = field(default_factory=dict)
    target: HttpTarget | None = None
    started_ms: int = field(default_factory=wall_ms)
    _client: CommandClient | None = None

    # -- commands -------------------------------------------------------------------------

    async def submit(self, commands: Iterable[Command], *, retries: int = 3) -> list[CommandRecord]:
        """Append commands with the client library; a timeout after retries is ``unknown``."""
        batch = list(commands)
        outcome, detail = CommandOutcome.UNKNOWN, ""
        for _ in range(retries):
            try:
                await asyncio.wait_for(self._submit_once(batch), SUBMIT_TIMEOUT_S)
            except Exception as exc:
                detail = repr(exc)
                await self._drop_client()
                continue
            outcome, detail = CommandOutcome.OK, ""
            break
        recorded = [CommandRecord(c, outcome, wall_ms(), detail) for c in batch]
        self.commands.extend(recorded)
        return recorded

    def note(self, command: Command, outcome: CommandOutcome, detail: str = "") -> None:
        """Record a command submitted by other means (the gateway, a client being killed)."""
        self.commands.append(CommandRecord(command, outcome, wall_ms(), detail))

    async def _submit_once(self, batch: list[Command]) -> None:
        if self._client is None:
            client = CommandClient(self.settings, principal=self.principal)
            await client.__aenter__()
            self._client = client
        for start in range(0, len(batch), 2_000):
            await self._client.submit_many(batch[start : start + 2_000])

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.__aexit__(None, None, None), 10)

    # -- the concurrent tail ----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def tailing(self) -> AsyncIterator[Recorder]:
        """Tail ``runs`` and ``job-events`` read_committed in the background while the block runs."""
        stop = asyncio.Event()
        task = asyncio.create_task(self._tail(stop))
        try:
            yield self
        finally:
            stop.set()
            done, _ = await asyncio.wait({task}, timeout=30)
            if not done:  # stuck talking to a dead broker: the tail is over anyway
                task.cancel()
                await asyncio.wait({task}, timeout=10)
            await self._drop_client()

    async def _tail(self, stop: asyncio.Event) -> None:
        topics = [self.settings.topic("runs"), self.settings.topic("job-events")]
        partitions = [TopicPartition(t, p) for t in topics for p in range(self.settings.partitions)]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=15_000,
        )
        await consumer.start()
        try:
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            while not stop.is_set():
                with contextlib.suppress(Exception):  # the broker may be down: keep tailing
                    self._note(await consumer.getmany(timeout_ms=200, max_records=10_000))
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _note(self, batch: Mapping[Any, list[Any]]) -> None:
        now = wall_ms()
        for records in batch.values():
            for r in records:
                key = (r.topic, r.partition, r.offset)
                if key not in self.seen:
                    self.seen[key] = Seen(r.topic, r.partition, r.offset, r.value, now)

    # -- the end ----------------------------------------------------------------------------

    async def finish(
        self, projection: Mapping[str, str] | None = None, *, now_ms: int | None = None
    ) -> History:
        """Scan the final log (read_committed) and ``runs`` read_uncommitted; freeze the history.

        ``now_ms``: the end of the scenario in the processor's time, when a test moved its clock.
        """
        log = [r for role in DEFAULT_ROLES for r in await scan(self.settings, role, isolation=COMMITTED)]
        uncommitted = await scan(self.settings, "runs", isolation="read_uncommitted")
        return History(
            prefix=self.settings.topic_prefix,
            commands=tuple(self.commands),
            concurrent=tuple(self.seen.values()),
            log=tuple(log),
            uncommitted_runs=tuple(uncommitted),
            target_calls=tuple(target_ledger(self.target)) if self.target is not None else (),
            projection=projection,
            started_ms=self.started_ms,
            finished_ms=wall_ms() if now_ms is None else now_ms,
        )


def target_ledger(target: HttpTarget) -> list[TargetCall]:
    """The target's calls with their arrival in wall-clock time (the target keeps monotonic)."""
    offset_s = time.time() - time.monotonic()
    return [
        TargetCall(c.run_id, c.idempotency_key, c.attempt, int((c.at + offset_s) * 1000), c.applied, c.status)
        for c in target.calls
    ]


async def scan(settings: Settings, role: str, *, isolation: str) -> list[LogRecord]:
    """Every record of one topic up to its end offsets now, with the given isolation level."""
    topic = settings.topic(str(role))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, isolation_level=isolation, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        found: list[LogRecord] = []
        deadline = time.monotonic() + 60
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"scan of {topic} ({isolation}) stalled short of {end}")
            batch = await consumer.getmany(timeout_ms=1_000, max_records=10_000)
            found += [
                LogRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                for records in batch.values()
                for r in records
                if r.offset < end[TopicPartition(r.topic, r.partition)]
            ]
        return found
    finally:
        await consumer.stop()
