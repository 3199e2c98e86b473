"""A worker's consumer for one pool: the ``runs`` topic in group ``<app_id>.workers.<pool>``.

It reads ``runs`` with ``read_committed`` (aborted or open processor transactions are never
seen), keeps the RunDue of its pool, remembers RunCancelled, and hands each new attempt to
a :class:`RunDriver` task.

Delivery is at-least-once. Offsets are committed up to the oldest RunDue whose lease is
not yet acknowledged (``tracking.OffsetLedger``); on revocation the worker first lets
leases in flight settle and commits. What is left:

* *Redelivery to this worker* (a rebalance that hands the partition back, or a commit that
  failed): the attempt is still held or already started, and is ignored (dedupe by
  ``(run_id, attempt)``, bounded memory of ``dedupe_capacity`` attempts).
* *Redelivery to another worker* after a crash between the RunStarted ack and the offset
  commit (commits are coalesced, so up to a few hundred milliseconds), or after the member
  was expelled from the group (missed heartbeats) in that same window so its commit
  failed: the other worker does not know the attempt was started and starts it again.
  The processor accepts only the first RunStarted of an attempt, but the second worker
  cannot learn that before calling the target. This is why every call carries
  ``Idempotency-Key: <run_id>`` and the attempt as fencing token: the target applies the
  effect once. Nothing a worker alone can do closes this window without a round trip to
  the processor before each call.

The cancel rule needs the LSO of a partition as of the moment a run wants to start, then the
consumed position to reach it. LSO lookups (``end_offsets`` of a read_committed client) go
through :class:`LsoProbe` on a connection of their own and are coalesced; positions are read
after every batch (they advance past transaction markers even when no record is returned)
and waiters are woken. Backpressure pauses the consumer when too many runs are pending, but
never while a run is waiting for its partition to be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from tickwheel.schemas.mappers import run_event_from_bytes
from tickwheel.schemas.model import RunCancelled, RunDue
from tickwheel.settings import Settings
from tickwheel.workers.run import UNSTARTED, ActiveRun, RunDriver, RunPhase, Services, StopKind
from tickwheel.workers.tenancy import TeamGate
from tickwheel.workers.tracking import CancelMemory, OffsetLedger, RecentSet

log = logging.getLogger("tickwheel.worker.pool")

POLL_MS = 200
LEASE_SETTLE_S = 5.0  # on revocation, how long leases in flight may take to be acked
COMMIT_EVERY_S = 0.2


class _Changes:
    """Wakes every waiter whenever positions or ownership change."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._event.wait()


class LsoProbe:
    """Coalesced LSO lookups: one ``end_offsets`` request answers every run that asked before it.

    A run needs the LSO *as of the moment it asked*, so a request already sent does not serve
    later callers: they share the next one. That one goes out at once, overlapping any still
    in flight, since a run waiting here holds a worker slot: waiting for the previous answer
    first would add half a round trip to every start. At a hot instant this turns one
    ListOffsets round trip per run into one per loop iteration in which runs asked.
    """

    def __init__(self, fetch: Callable[[list[Any]], Awaitable[dict[Any, int]]]) -> None:
        self._fetch = fetch
        self._waiting: dict[Any, list[asyncio.Future[int]]] = {}
        self._requests: set[asyncio.Task[None]] = set()
        self._gathering = False  # a request task exists that has not yet taken the waiting callers
        self.requests = 0

    async def observe(self, tp: Any) -> int:
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tp, []).append(answer)
        if not self._gathering:
            self._gathering = True
            request = asyncio.create_task(self._request())
            self._requests.add(request)  # held, so it is not collected while in flight
            request.add_done_callback(self._requests.discard)
        return await answer

    async def _request(self) -> None:
        batch, self._waiting, self._gathering = self._waiting, {}, False
        self.requests += 1
        try:
            offsets = await self._fetch(list(batch))
        except Exception as exc:  # noqa: BLE001 - handed to every caller of this batch
            for answers in batch.values():
                _settle(answers, error=exc)
            return
        for tp, answers in batch.items():
            _settle(answers, value=int(offsets[tp]))


def _settle(answers: list[asyncio.Future[int]], value: int = 0, error: Exception | None = None) -> None:
    for answer in answers:
        if answer.done():
            continue  # its caller gave up (cancelled)
        if error is None:
            answer.set_result(value)
        else:
            answer.set_exception(error)


class PoolRunner:
    """Consumes ``runs`` for one pool and drives its runs."""

    def __init__(self, pool: str, settings: Settings, services: Services) -> None:
        self.pool = pool
        self.settings = settings
        self.s = services
        self.topic = settings.topic("runs")
        self.group_id = f"{settings.app_id}.workers.{pool}"
        capacity = services.config.dedupe_capacity
        self.ledger: OffsetLedger[Any] = OffsetLedger()
        self.started: RecentSet[tuple[str, int]] = RecentSet(capacity)
        self.cancels = CancelMemory(capacity)
        self.live: dict[tuple[str, int], ActiveRun] = {}
        self.phases: Counter[RunPhase] = Counter()  # of the live runs, kept by ActiveRun.advance
        self.team_gate = TeamGate(services.config.team_limits)
        self.owned: set[Any] = set()
        self.positions: dict[Any, int] = {}
        self.assigned = asyncio.Event()  # set once the group gave this member its partitions
        self.driver = RunDriver(services, self)
        self.consumer: Any = None
        self.offsets_client: Any = None
        self.lso = LsoProbe(self._end_offsets)
        self._changes = _Changes()
        self._commit_wanted = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._checking = 0

    # -- the loop ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer = self._new_consumer(
            group_id=self.group_id,
            client_id=f"{self.s.config.worker_id}.{self.pool}",
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            max_poll_interval_ms=300_000,
        )
        # LSO lookups get their own connection: on the group consumer's they would queue behind
        # its fetch long-poll (the broker answers one connection's requests in order), ~0.5 s each.
        self.offsets_client = self._new_consumer(client_id=f"{self.s.config.worker_id}.{self.pool}.lso")
        self.consumer.subscribe([self.topic], listener=_Listener(self))
        async with contextlib.AsyncExitStack() as clients:
            for client in (self.offsets_client, self.consumer):
                clients.push_async_callback(client.stop)  # also after a failed start
                await client.start()
            await self._serve(stop)

    def _new_consumer(self, **options: Any) -> Any:
        return AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            enable_auto_commit=False,
            isolation_level="read_committed",
            **options,
        )

    async def _serve(self, stop: asyncio.Event) -> None:
        committer = asyncio.create_task(self._commit_loop())
        try:
            while not stop.is_set():
                await self._poll()
        finally:
            await self._shutdown()
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer
            await self._commit()

    async def _poll(self) -> None:
        batch = await self.consumer.getmany(timeout_ms=POLL_MS, max_records=500)
        for records in batch.values():
            for record in records:
                self._on_record(record)
        await self._note_positions()
        pending = self.phases[RunPhase.HELD] + self.phases[RunPhase.QUEUED]
        self._backpressure(pending)
        self.s.metrics.pending.labels(self.pool).set(pending)

    def _on_record(self, record: Any) -> None:
        try:
            event = run_event_from_bytes(record.value)
        except Exception:  # the processor writes runs; a bad record is skipped, not fatal
            log.exception(
                "skipping undecodable record %s[%d]@%d", record.topic, record.partition, record.offset
            )
            return
        tp = TopicPartition(record.topic, record.partition)
        if isinstance(event, RunDue) and event.pool == self.pool:
            self._on_due(tp, record.offset, event)
        elif isinstance(event, RunCancelled):
            self._on_cancel(event)

    def _on_due(self, tp: Any, offset: int, due: RunDue) -> None:
        key = (due.run_id, due.attempt)
        if key in self.live or key in self.started:
            self.s.metrics.redeliveries_deduped.labels(self.pool).inc()
            return
        if self.cancels.cancelled(*key):
            return
        run = ActiveRun(due, tp, offset, phases=self.phases)
        if self.s.clock() >= run.start_by_ms:
            self.s.metrics.runs_dropped.labels(self.pool, "stale").inc()
            return
        self.phases[run.phase] += 1
        self.live[key] = run
        self.ledger.hold(tp, offset)
        run.task = asyncio.create_task(self.driver.drive(run), name=f"run-{due.run_id}-{due.attempt}")
        # A callback, not a finally in drive(): a task cancelled before it first ran skips its body.
        run.task.add_done_callback(lambda task: self._done(run, task))

    def _on_cancel(self, cancel: RunCancelled) -> None:
        self.cancels.record(cancel.run_id, cancel.attempt)
        for run in list(self.live.values()):
            if run.due.run_id != cancel.run_id or run.due.attempt > cancel.attempt:
                continue
            if run.phase in (RunPhase.HELD, RunPhase.QUEUED):
                run.drop("cancelled", release_offset=True)
            else:
                run.request_stop(StopKind.CANCELLED, cancel.reason)
        self._changes.fire()

    async def _note_positions(self) -> None:
        moved = False
        for tp, position in (await self._positions()).items():
            if position != self.positions.get(tp):
                self.positions[tp] = position
                self.ledger.consumed(tp, position)
                moved = True
        if moved:
            self._changes.fire()
            self._commit_wanted.set()

    async def _positions(self) -> dict[Any, int]:
        """Positions that are known right now; one still being reset (after assignment) is skipped."""
        asks = {tp: asyncio.ensure_future(self.consumer.position(tp)) for tp in self.owned}
        if not asks:
            return {}
        await asyncio.wait(asks.values(), timeout=0.01)
        known: dict[Any, int] = {}
        for tp, ask in asks.items():
            if not ask.done():
                ask.cancel()
            elif ask.exception() is None:  # an exception: the partition was just revoked
                known[tp] = int(ask.result())
        return known

    def _backpressure(self, pending: int) -> None:
        owned = [tp for tp in self.owned if tp in self.consumer.assignment()]
        if pending >= self.s.config.max_pending and self._checking == 0:
            self.consumer.pause(*owned)
        else:
            self.consumer.resume(*owned)

    # -- what a run asks of its pool (PoolPort) ---------------------------------------------

    async def may_start(self, run: ActiveRun) -> bool:
        """The cancel rule: read ``run``'s partition up to its LSO as of now, then look for a cancel.

        A leased run (the second check, step 5b) whose partition is taken away meanwhile can
        be checked no further here: it goes on, as it would have without that check, rather
        than wait without heartbeats for a partition that may never come back.
        """
        self._checking += 1
        try:
            lso = await self._last_stable_offset(run)
            await self._changes.wait_until(
                lambda: (
                    run.stop_requested.is_set()
                    or (run.tp in self.owned and self.positions.get(run.tp, -1) >= lso)
                    or (run.phase is RunPhase.RUNNING and run.tp not in self.owned)
                )
            )
        finally:
            self._checking -= 1
        return not (run.stop_requested.is_set() or self.cancels.cancelled(*run.key))

    async def _end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        # end_offsets of a read_committed consumer is the LSO, not the high watermark.
        return dict(await self.offsets_client.end_offsets(tps))

    async def _last_stable_offset(self, run: ActiveRun) -> int:
        """``end_offsets`` of a read_committed consumer is the LSO; asked now, retried until answered."""
        while True:
            try:
                return await self.lso.observe(run.tp)
            except KafkaError as exc:
                log.warning("run %s attempt %d: cannot read the LSO of %s yet: %r", *run.key, run.tp, exc)
                await asyncio.sleep(1.0)

    def mark_started(self, run: ActiveRun) -> None:
        self.started.add(run.key)

    def lease_acked(self, run: ActiveRun) -> None:
        self.ledger.release(run.tp, run.offset)
        self._commit_wanted.set()

    def _done(self, run: ActiveRun, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self.driver.cancelled(run)
        if self.live.pop(run.key, None) is run:
            self.phases[run.phase] -= 1
        if run.release_offset:
            self.ledger.release(run.tp, run.offset)
            self._commit_wanted.set()

    # -- commits ------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            await self._commit()
            await asyncio.sleep(COMMIT_EVERY_S)  # coalesce bursts of acks into one commit

    async def _commit(self, only: set[Any] | None = None) -> None:
        async with self._commit_lock:
            points = {
                tp: p
                for tp, p in self.ledger.to_commit().items()
                if tp in self.owned and (only is None or tp in only)
            }
            if not points:
                return
            try:
                await self.consumer.commit({tp: OffsetAndMetadata(p, "") for tp, p in points.items()})
            except KafkaError as exc:
                log.warning("offset commit failed (redelivery will be deduped or is idempotent): %r", exc)
                return
            for tp, p in points.items():
                self.ledger.committed(tp, p)

    # -- rebalances ---------------------------------------------------------------------

    async def on_revoked(self, revoked: set[Any]) -> None:
        """Let leases in flight settle, commit, then stop treating the partitions as ours."""
        leasing = [
            asyncio.ensure_future(run.lease_settled.wait())
            for run in self.live.values()
            if run.tp in revoked and run.phase is RunPhase.LEASING
        ]
        if leasing:
            _, late = await asyncio.wait(leasing, timeout=LEASE_SETTLE_S)
            for waiter in late:
                waiter.cancel()
        await self._commit(only=revoked)
        self.owned -= revoked
        for tp in revoked:
            self.positions.pop(tp, None)
        self._changes.fire()

    def on_assigned(self, assigned: set[Any]) -> None:
        """Keep what came back (its redelivery is deduped); drop unstarted runs of what did not."""
        lost = {run.tp for run in self.live.values()} - assigned
        for run in list(self.live.values()):
            if run.tp in lost and run.phase in UNSTARTED:
                run.drop("revoked", release_offset=False)
        for tp in lost:
            self.ledger.forget(tp)
        for tp in assigned:
            self.ledger.reset(tp)
        self.owned = set(assigned)
        total = len(self.consumer.partitions_for_topic(self.topic) or ()) or self.settings.partitions
        self.team_gate.set_assignment(len(assigned), total)
        self._changes.fire()
        self.assigned.set()
        log.info("pool %s: assigned %s", self.pool, sorted(tp.partition for tp in assigned))

    # -- shutdown -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Drop unstarted runs (others will get them), let running ones finish, then stop them."""
        for run in list(self.live.values()):
            if run.phase in UNSTARTED:
                run.drop("shutdown", release_offset=False)
        await self._wait_runs(self.s.config.shutdown_grace_ms / 1000)
        for run in list(self.live.values()):
            run.request_stop(StopKind.SHUTDOWN, "worker shutting down")
        await self._wait_runs(self.s.config.kill_grace_ms / 1000 + 10)
        for run in list(self.live.values()):
            if run.task is not None:
                run.task.cancel()
        await self._wait_runs(5)

    async def _wait_runs(self, timeout_s: float) -> None:
        tasks = [run.task for run in self.live.values() if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: PoolRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        await self.runner.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        self.runner.on_assigned(set(assigned))
