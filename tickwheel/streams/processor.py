"""One partition's scheduler task: restore, step, and the commit protocol.

A :class:`PartitionTask` owns partition ``p`` of every job-keyed topic: it reads
``commands[p]`` and ``outcomes[p]``, keeps the jobs' state in a RocksDB store at
``state_dir/p`` (a cache of ``sched-changelog[p]``), and writes ``runs[p]``,
``job-events[p]``, ``sched-changelog[p]`` and the dead-letter topic, all of one step in one
Kafka transaction whose ``transactional.id`` is ``<app>.sched.<p>``.

Lifecycle (undeclared transitions raise)::

    CREATED -> RESTORING -> RUNNING -> SUSPENDED -> RESTORING ...
        any state -> CLOSED

The pure decisions are :func:`tickwheel.streams.core.step`; this module is the shell that
owns the clock, Kafka and RocksDB. RocksDB calls run on one dedicated thread per store, in
batches, never unbatched on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from tickwheel import failpoints
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import (
    Command,
    DeadLetter,
    JobEvent,
    JobState,
    Outcome,
    RunCancelled,
    RunDue,
    RunEvent,
    RunSkipped,
)
from tickwheel.settings import Settings
from tickwheel.streams import admission, core
from tickwheel.streams.metrics import ProcessorMetrics
from tickwheel.streams.store import StateStore, StoreBatch
from tickwheel.streams.timers import TIMERS_HEADER, Timer, TimerKind, pack_timers, unpack_timers
from tickwheel.streams.wheel import TimingWheel

log = logging.getLogger("tickwheel.processor")
T = TypeVar("T")


class TaskState(StrEnum):
    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CLOSED = "closed"


_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.RUNNING: frozenset({TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.SUSPENDED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}


class IllegalTransitionError(RuntimeError):
    """A task was asked to move between states its lifecycle does not connect."""


class TaskFencedError(RuntimeError):
    """Another owner initialised this partition's transactional id: this task is a zombie."""


@dataclass(frozen=True, slots=True)
class Topics:
    commands: str
    outcomes: str
    runs: str
    job_events: str
    changelog: str
    dlq: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Topics:
        return cls(
            commands=settings.topic("commands"),
            outcomes=settings.topic("outcomes"),
            runs=settings.topic("runs"),
            job_events=settings.topic("job-events"),
            changelog=settings.topic("sched-changelog"),
            dlq=settings.topic("dlq"),
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one committed step did (for metrics, tests and the runtime's pacing)."""

    inputs: int
    timers: int
    run_dues: int
    records: int
    deferred: int
    committed: bool


@dataclass
class _Work:
    """One step's decisions, held in memory until the transaction commits."""

    now_ms: int
    loaded: dict[str, JobState | None]  # states as of the last commit
    states: dict[str, JobState | None] = field(default_factory=dict)  # working states
    records: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    decided_timers: list[Timer] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    run_dues: list[RunDue] = field(default_factory=list)
    # timers_of each changed state, computed once for the changelog header and the diff
    timers: dict[str, frozenset[Timer]] = field(default_factory=dict)
    inputs: int = 0
    deferred: int = 0

    def state(self, job_id: str) -> JobState | None:
        return self.states[job_id] if job_id in self.states else self.loaded.get(job_id)


class StoreThread:
    """Runs a store's blocking calls on one dedicated thread, off the event loop."""

    def __init__(self, store: StateStore, name: str) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """Close the store; a store that fails to close (e.g. a full disk flushing) is logged,
        never raised: it is only a cache, and the next owner restores from the changelog."""
        try:
            self._pool.submit(self.store.close).result()
        except Exception:
            log.warning("store close failed; the changelog remains the truth", exc_info=True)
        finally:
            self._pool.shutdown(wait=True)


class PartitionTask:
    """The scheduler for one partition. See the module docstring."""

    def __init__(
        self,
        partition: int,
        *,
        settings: Settings,
        store: StateStore,
        clock: Callable[[], int],
        metrics: ProcessorMetrics,
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.topics = Topics.from_settings(settings)
        self.clock = clock
        self.metrics = metrics
        self.state = TaskState.CREATED
        self._store = StoreThread(store, f"store-{partition}")
        # Decoded committed states of recently touched jobs: decoding is the dearest part of
        # loading a job, and a hot instant touches the same jobs the look-ahead just loaded.
        self._states = StateCache(settings.state_cache_size)
        # Jobs whose FIRE timers entered the near wheel, to be warmed into the cache by idle
        # ticks (see _warm); at most half the cache, so warming never evicts what it warmed.
        self._to_warm: deque[str] = deque()
        self.wheel = TimingWheel(store, on_load=self._entered)
        self.producer: AIOKafkaProducer | None = None
        self.cfg = core.CoreConfig(
            misfire_tolerance_ms=settings.misfire_tolerance_ms,
            start_timeout_ms=settings.start_timeout_ms,
            min_interval_ms=settings.min_interval_ms,
            tz_version=_tz_version(),
        )
        self.input_tps = (
            TopicPartition(self.topics.commands, partition),
            TopicPartition(self.topics.outcomes, partition),
        )

    @property
    def transactional_id(self) -> str:
        return f"{self.settings.app_id}.sched.{self.partition}"

    def _transition(self, target: TaskState) -> None:
        if target not in _TRANSITIONS[self.state]:
            raise IllegalTransitionError(f"task {self.partition}: {self.state} -> {target}")
        log.info("task %d: %s -> %s", self.partition, self.state, target)
        self.state = target

    # -- restore ----------------------------------------------------------------------

    async def start(self) -> None:
        """Fence any previous owner, then bring the store up to the changelog's end."""
        self._transition(TaskState.RESTORING)
        started = time.monotonic()
        # Step 1 of ownership: InitProducerId bumps the epoch, fencing the old owner and
        # aborting its open transaction, so the changelog cannot grow behind our back.
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap_servers,
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.settings.transaction_timeout_ms,
            linger_ms=2,
            max_batch_size=512 * 1024,
            request_timeout_ms=30_000,
        )
        await self.producer.start()
        await self._restore()
        await self._store.call(self.wheel.refill, self.clock())
        self.metrics.restore_seconds.observe(time.monotonic() - started)
        self._transition(TaskState.RUNNING)

    async def _restore(self) -> None:
        """Replay ``sched-changelog[p]`` from the store's offset (or from 0 if it is ahead)."""
        tp = TopicPartition(self.topics.changelog, self.partition)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            stored = await self._store.call(self._store.store.changelog_offset)
            start = stored or 0
            if start > end:
                log.warning(
                    "task %d: store ahead of changelog (%d > %d): rebuild", self.partition, start, end
                )
                await self._store.call(self._store.store.clear)
                start = 0
            consumer.seek(tp, start)
            applied = 0
            # Fetch the next batch while the store thread applies the last one (in order:
            # one thread; one batch in flight bounds memory).
            applying: asyncio.Future[None] | None = None
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1_000, max_records=5_000)
                records = batch.get(tp, [])
                if applying is not None:
                    await applying
                    applying = None
                if records:
                    applying = asyncio.ensure_future(
                        self._store.call(_apply_changelog, self._store.store, records)
                    )
                    applied += len(records)
            if applying is not None:
                await applying
            log.info("task %d: restored %d changelog records from offset %d", self.partition, applied, start)
        finally:
            await consumer.stop()

    # -- stepping ---------------------------------------------------------------------

    async def step(self, records: Sequence[ConsumerRecord]) -> StepResult:
        """Decide on a batch of inputs plus every timer due now; commit it as one fact.

        Step 1: decode the inputs; anything undecodable becomes a dead letter.
        Step 2: load the touched jobs' committed states (one multi-get on the store thread).
        Step 3: decide the inputs in order, then the admitted timers (look-ahead for FIRE).
        Step 4: in one transaction, produce events and changelog records to partition p and
                add the input offsets (``send_offsets_to_transaction``).
        Step 5: commit. A fenced task stops here; any other failure aborts and rewinds.
        Step 6: only now write RocksDB: states, timer diff and changelog offset in one batch;
                then mirror the timer diff into the in-memory wheel.
        """
        if self.state is not TaskState.RUNNING:
            return StepResult(0, 0, 0, 0, 0, committed=False)
        now = self.clock()
        await self._store.call(self.wheel.refill, now)
        candidates = [
            t
            for t in self.wheel.due(now + self.settings.lookahead_ms)
            if t.kind is TimerKind.FIRE or t.due_ms <= now
        ]
        if not records and not candidates:
            await self._warm()
            return StepResult(0, 0, 0, 0, 0, committed=True)
        # Steps 1-3
        work = await self._decide(records, candidates, now)
        failpoints.hit("after_decide")
        if not work.records and not work.offsets and not self._changed(work):
            return StepResult(work.inputs, 0, 0, 0, work.deferred, committed=True)
        # Steps 4-6
        await self._commit(work)
        log.debug(
            "task %d: step inputs=%d timers=%d/%d run_dues=%d records=%d in %.0f ms",
            self.partition, work.inputs, len(work.decided_timers), len(candidates),
            len(work.run_dues), len(work.records), self.clock() - now,
        )
        self.metrics.due_backlog.labels(str(self.partition)).set(work.deferred)
        self.metrics.wheel_size.labels(str(self.partition)).set(self.wheel.size())
        return StepResult(
            work.inputs,
            len(work.decided_timers),
            len(work.run_dues),
            len(work.records),
            work.deferred,
            committed=True,
        )

    async def _decide(self, records: Sequence[ConsumerRecord], candidates: list[Timer], now: int) -> _Work:
        decoded = [(record, _decode_input(record)) for record in records]
        # Admission needs only each timer's team, which the index carries: no state is
        # loaded for the timers that wait.
        admitted, deferred = admission.admit(
            [(t, t.team) for t in candidates],
            now_ms=now,
            limit=self.settings.max_fires_per_step,
            catchup_budget=self.settings.catchup_budget_per_step,
            misfire_tolerance_ms=self.settings.misfire_tolerance_ms,
        )
        job_ids = {_job_id(inp) for _, inp in decoded if not isinstance(inp, DeadLetter)}
        job_ids.update(t.job_id for t in admitted)
        work = _Work(now_ms=now, loaded=await self._load(job_ids), deferred=len(deferred))
        for record, inp in decoded:
            work.offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
            work.inputs += 1
            if isinstance(inp, DeadLetter):
                self._emit(work, [inp], key=record.key)
                continue
            self._apply(work, inp)
        for timer in admitted:
            work.decided_timers.append(timer)
            self._apply(work, timer)
        return work

    def _apply(self, work: _Work, inp: Command | Outcome | Timer) -> None:
        job_id = inp.job_id if isinstance(inp, Timer) else _job_id(inp)
        state, events = core.step(work.state(job_id), inp, work.now_ms, self.cfg)
        work.states[job_id] = state
        self._emit(work, core.published(events), key=job_id.encode())

    def _emit(
        self, work: _Work, events: Iterable[RunEvent | JobEvent | DeadLetter], key: bytes | None
    ) -> None:
        for event in events:
            if isinstance(event, DeadLetter):
                topic = self.topics.dlq
            elif isinstance(event, RunDue | RunCancelled | RunSkipped):
                topic = self.topics.runs
                if isinstance(event, RunDue):
                    work.run_dues.append(event)
            else:
                topic = self.topics.job_events
            work.records.append((topic, key, mappers.to_bytes(event)))

    @staticmethod
    def _changed(work: _Work) -> bool:
        # Identity, not equality: evolve returns a new object for any change, and comparing
        # whole specs per job would cost more than the rare redundant changelog record.
        return any(work.loaded.get(job_id) is not state for job_id, state in work.states.items())

    async def _load(self, job_ids: set[str]) -> dict[str, JobState | None]:
        """Committed states: from the decoded-state cache, else one multi-get and decode."""
        loaded: dict[str, JobState | None] = {}
        missing: list[str] = []
        for job_id in job_ids:
            cached = self._states.get(job_id)
            if cached is None:
                missing.append(job_id)
            else:
                loaded[job_id] = cached
        if missing:
            raw = await self._store.call(self._store.store.get_many, sorted(missing))
            for job_id in missing:
                value = raw.get(job_id)
                state = None if value is None else mappers.state_from_bytes(value)
                loaded[job_id] = state
                if state is not None:
                    self._states.put(job_id, state)
        return loaded

    def _entered(self, timers: list[Timer]) -> None:
        """The wheel loaded ``timers`` from the store (store thread or loop): note their jobs."""
        room = self._states.capacity // 2 - len(self._to_warm) if self.settings.state_warm_batch else 0
        for timer in timers:
            if room <= 0:
                return
            if timer.kind is TimerKind.FIRE:
                self._to_warm.append(timer.job_id)
                room -= 1

    async def _warm(self) -> int:
        """An idle tick decodes the committed states of jobs whose FIRE timers are near.

        A hot instant of jobs not touched since they were registered would otherwise load
        and decode every state at the instant, which costs about as much as deciding and
        writing the run (cold states dispatch at half the rate of cached ones). Before the
        instant the processor is idle, so it does that work then, ``state_warm_batch`` states
        per idle tick. The cache holds committed states only, as :meth:`_load` does: what
        a later step commits replaces them. A state that does not decode is left for the
        step that needs it, which dead-letters or fails as it would have.
        """
        batch = self.settings.state_warm_batch
        ids: list[str] = []
        while self._to_warm and len(ids) < batch:
            job_id = self._to_warm.popleft()
            if job_id not in self._states:
                ids.append(job_id)
        if not ids:
            return 0
        raw = await self._store.call(self._store.store.get_many, ids)
        warmed = 0
        for job_id, value in raw.items():
            try:
                state = mappers.state_from_bytes(value)
            except CodecError:
                continue
            self._states.put(job_id, state)
            warmed += 1
        self.metrics.states_warmed.inc(warmed)
        return warmed

    async def _commit(self, work: _Work) -> None:
        """The commit protocol (steps 4-6 of :meth:`step`); see docs/design.md for failures."""
        producer = self.producer
        assert producer is not None
        batch = StoreBatch()
        writer = _BatchWriter(producer, self.partition)
        started = time.monotonic()
        try:
            # Step 4: one transaction for events, changelog and input offsets, written with
            # aiokafka's batch API (a few µs per record instead of ~10 for send()).
            await producer.begin_transaction()
            for topic, key, value in work.records:
                await writer.append(topic, key, value)
            for job_id, state in work.states.items():
                if work.loaded.get(job_id) is state:
                    continue
                value = None if state is None else mappers.state_to_bytes(state)
                batch.jobs[job_id] = value
                timers = work.timers[job_id] = core.timers_of(state)
                await writer.append(
                    self.topics.changelog, job_id.encode(), value, _timer_headers(state, timers)
                )
            if work.offsets:
                await producer.send_offsets_to_transaction(work.offsets, self._group_id)
            last_offsets = await writer.flush()
            failpoints.hit("after_produce_before_commit")
            # Step 5: the decision and the intent to dispatch become durable together.
            await producer.commit_transaction()
        except Exception as exc:
            writer.discard()
            self._on_failed_commit(exc)
            raise
        commit_ms = self.clock()
        self.metrics.transaction_seconds.observe(time.monotonic() - started)
        failpoints.hit("after_commit_before_store")
        # Step 6: RocksDB is a cache written only after the commit, offset in the same batch.
        if self.topics.changelog in last_offsets:
            batch.changelog_offset = last_offsets[self.topics.changelog] + 1
        added, removed = _timer_diff(work)
        batch.timers_add, batch.timers_del = added, removed
        await self._store.call(_write_store, self._store.store, batch)
        self.wheel.apply(added, removed)
        for job_id, state in work.states.items():
            self._states.put(job_id, state)
        for due in work.run_dues:
            self.metrics.scheduling_lag.observe(max(0, commit_ms - due.not_before_ms) / 1000)
        self.metrics.run_due_total.inc(len(work.run_dues))
        self.metrics.dead_letters.inc(sum(1 for topic, _, _ in work.records if topic == self.topics.dlq))

    def _on_failed_commit(self, exc: Exception) -> None:
        """Whether the commit landed is unknown: suspend; the runtime restores from the log.

        The inputs are not rewound to this step's first offsets: if the commit did land,
        that would decide them twice. The runtime re-initialises the producer (which
        completes or aborts the pending transaction), restores the store from the changelog
        and seeks the inputs to the group's committed offsets, which are exact either way.
        """
        from aiokafka.errors import ProducerFenced

        self._transition(TaskState.SUSPENDED)
        if isinstance(exc, ProducerFenced):
            self.metrics.fenced_producers.inc()
            log.error("task %d: fenced by a newer owner; stopping this task", self.partition)
            raise TaskFencedError(str(exc)) from exc
        log.exception("task %d: transaction failed; restoring from the log", self.partition)

    @property
    def _group_id(self) -> str:
        return f"{self.settings.app_id}.sched"

    async def close(self) -> None:
        """Stop the producer (aborting nothing committed) and close the store."""
        if self.state is TaskState.CLOSED:
            return
        self._transition(TaskState.CLOSED)
        if self.producer is not None:
            try:
                await self.producer.stop()
            except Exception:
                log.warning("task %d: producer stop failed", self.partition, exc_info=True)
        self._store.close()


# -- helpers (pure or store-thread) ----------------------------------------------------


def _job_id(inp: Command | Outcome) -> str:
    meta = getattr(inp, "meta", None)
    return str(meta.job_id) if meta is not None else str(getattr(inp, "job_id"))  # noqa: B009


def _decode_input(record: ConsumerRecord) -> Command | Outcome | DeadLetter:
    """Decode one input record, or explain in a dead letter why it cannot be."""
    event, reason = _try_decode(record)
    if event is not None:
        return event
    return DeadLetter(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        reason=f"undecodable input: {reason}",
        at_ms=time.time_ns() // 1_000_000,
    )


def _try_decode(record: ConsumerRecord) -> tuple[Command | Outcome | None, str]:
    """The input's event, or None and why it cannot be processed."""
    if record.value is None:
        return None, "empty record value (tombstone) on an input topic"
    decode = mappers.command_from_bytes if record.topic.endswith("commands") else mappers.outcome_from_bytes
    try:
        event: Command | Outcome = decode(record.value)
    except CodecError as exc:
        return None, str(exc)
    job_id = _job_id(event)
    if record.key is not None and record.key != job_id.encode():
        return None, f"record key {record.key!r} does not match job id {job_id!r}"
    return event, ""


def _timer_diff(work: _Work) -> tuple[set[Timer], set[Timer]]:
    """Timers to add and remove so the index equals ``timers_of`` every changed state."""
    added: set[Timer] = set()
    removed: set[Timer] = set()
    for job_id, state in work.states.items():
        if work.loaded.get(job_id) is state:
            continue  # unchanged: nothing to diff
        before = core.timers_of(work.loaded.get(job_id))
        after = work.timers.get(job_id)
        if after is None:
            after = work.timers[job_id] = core.timers_of(state)
        added |= after - before
        removed |= before - after
    # A decided timer that its job's state no longer implies must leave the index even if
    # the state did not change (a stale entry would otherwise be decided forever).
    for timer in work.decided_timers:
        implied = work.timers.get(timer.job_id)
        if implied is None:
            implied = core.timers_of(work.state(timer.job_id))
        if timer not in implied:
            removed.add(timer)
    return added, removed


def _timer_headers(state: JobState | None, timers: frozenset[Timer]) -> list[tuple[str, bytes]]:
    """The changelog record's ``tw-timers`` header (none on a tombstone)."""
    return [] if state is None else [(TIMERS_HEADER, pack_timers(timers))]


class StateCache:
    """A bounded LRU of decoded committed job states (None entries are not cached)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[str, JobState] = OrderedDict()

    def get(self, job_id: str) -> JobState | None:
        state = self._data.get(job_id)
        if state is not None:
            self._data.move_to_end(job_id)
        return state

    def put(self, job_id: str, state: JobState | None) -> None:
        if state is None or self.capacity <= 0:
            self._data.pop(job_id, None)
            return
        self._data[job_id] = state
        self._data.move_to_end(job_id)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, job_id: object) -> bool:
        """Whether ``job_id`` is cached (without making it the most recently used)."""
        return job_id in self._data


class _BatchWriter:
    """Appends a step's records to partition p of each topic in large producer batches."""

    def __init__(self, producer: AIOKafkaProducer, partition: int) -> None:
        self._producer = producer
        self._partition = partition
        self._open: dict[str, Any] = {}
        self._sent: list[tuple[str, asyncio.Future[Any], int]] = []

    async def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        headers = headers or []  # aiokafka's batch builder takes a list, nothing else
        batch = self._open.get(topic)
        if batch is None:
            batch = self._open[topic] = self._producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is not None:
            return
        await self._send(topic)
        batch = self._open[topic] = self._producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
            raise ValueError(f"a record of {len(value or b'')} bytes does not fit in one batch")

    async def _send(self, topic: str) -> None:
        batch = self._open.pop(topic)
        count = batch.record_count()
        batch.close()
        future = await self._producer.send_batch(batch, topic, partition=self._partition)
        self._sent.append((topic, future, count))

    async def flush(self) -> dict[str, int]:
        """Send what is open and wait for every batch; the last offset written per topic."""
        for topic in list(self._open):
            await self._send(topic)
        last: dict[str, int] = {}
        for topic, future, count in self._sent:
            meta = await future
            last[topic] = max(last.get(topic, -1), meta.offset + count - 1)
        return last

    def discard(self) -> None:
        """After a failure: the batches' errors are the step's error; do not log them again."""
        for _, future, _ in self._sent:
            future.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _write_store(store: StateStore, batch: StoreBatch) -> None:
    failpoints.hit("inside_store_write")
    store.apply(batch)


def _apply_changelog(store: StateStore, records: Sequence[ConsumerRecord]) -> None:
    """Restore: fold changelog records into the store and its timer index.

    A record's timers come from its ``tw-timers`` header when written under the current
    rules (no decode: restore is otherwise decode-bound); records without one, and the
    states a record replaces, are decoded and derived with ``core.timers_of``.
    """
    latest: dict[str, ConsumerRecord] = {}
    for record in records:
        latest[record.key.decode()] = record
    old = store.get_many(latest)
    batch = StoreBatch(changelog_offset=records[-1].offset + 1)
    for job_id, record in latest.items():
        before = core.timers_of(mappers.state_from_bytes(old[job_id]) if job_id in old else None)
        after = _record_timers(record)
        batch.jobs[job_id] = record.value
        batch.timers_add |= after - before
        batch.timers_del |= before - after
    store.apply(batch)


def _record_timers(record: ConsumerRecord) -> frozenset[Timer]:
    """The timers of a changelog record's state: its header, else derived from the decoded state."""
    if record.value is None:
        return frozenset()
    for name, raw in record.headers or ():
        if name == TIMERS_HEADER:
            timers = unpack_timers(raw)
            if timers is not None:
                return timers
    return core.timers_of(mappers.state_from_bytes(record.value))


def _tz_version() -> str:
    from tickwheel.streams.schedule import tz_version

    return tz_version()
