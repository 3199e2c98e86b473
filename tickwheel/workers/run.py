"""One run attempt on a worker, from its RunDue to its outcome.

:meth:`RunDriver.drive` owns an attempt's protocol. Steps:

1. Hold until ``not_before_ms`` (look-ahead dispatch), on the pool's shared :class:`Alarm`;
   drop it if its start deadline (``start_by`` flag) has passed meanwhile: the processor
   re-dispatches it anyway.
2. Wait for a team slot (``tenancy.py``), then a worker slot; both are held through step 6.
3. Cancel rule: read the partition up to its last stable offset as observed now, then
   refuse to start if a RunCancelled for this attempt (or a later one) was seen. Drop it
   too if its start deadline passed while it waited for a slot.
4. Build the executor (parse config, resolve secrets). A config that cannot run is
   reported as a non-retryable RunFailed without a lease (the processor accepts results
   for a DUE attempt from any worker).
5. Lease: send RunStarted and wait for the ack; no ack, no execution. The attempt is
   marked started *before* sending, so a redelivery never starts it twice here; its offset
   becomes committable once acked. Then the cancel rule once more (5b): a cancel committed
   between step 3's LSO and the RunStarted is read now, and the executor is not called (the
   attempt reports itself cancelled, as when a cancel arrives during execution). Step 3
   alone leaves that window open: the chaos suite's cancel race found a lease written after
   the cancel's acknowledgement.
6. Execute with heartbeats, until the first of: the executor finishes, the job's timeout,
   a RunCancelled / shutdown request, or the lease cannot be renewed.
7. Report, after giving the slots back (they bound executions; holding them across the
   outcome's ack too would halve the starts per second of a hot instant): logs first, then
   exactly one outcome, unless the lease was lost, in which case nothing more is sent.

Failure scenarios: a crash before step 5's ack leaves the offset uncommitted; the RunDue is
redelivered and started afresh (the target was never called). A crash after it leaves a
lease that lapses; the processor re-dispatches with attempt + 1, and the target sees the
same Idempotency-Key (the run id) with a higher attempt (the fencing token). A crash between
the ack and the offset commit redelivers an attempt that was started: see ``pool.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from tickwheel import failpoints
from tickwheel.schemas.model import (
    LogChunk,
    Outcome,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunStarted,
    RunSucceeded,
    RunTimedOut,
)
from tickwheel.streams.core import start_deadline_ms
from tickwheel.workers.alarm import Alarm
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors.base import (
    ExecResult,
    Executor,
    ExecutorConfigError,
    ExecutorEnv,
    ExecutorRegistry,
    RunContext,
)
from tickwheel.workers.lease import LeaseKeeper, LeasePolicy, granted, stop_at_ms
from tickwheel.workers.metrics import LabelCache, WorkerMetrics
from tickwheel.workers.output import OutputCapture, utf8_prefix
from tickwheel.workers.secrets import Scrubber, SecretNotFound, SecretStore, resolve
from tickwheel.workers.tenancy import TeamGate

log = logging.getLogger("tickwheel.worker")


class RunPhase(StrEnum):
    HELD = "held"  # waiting for not_before
    QUEUED = "queued"  # waiting for a team slot and a worker slot
    CHECKING = "checking"  # cancel rule: reading the partition up to its LSO
    LEASING = "leasing"  # RunStarted sent, ack pending
    RUNNING = "running"
    REPORTING = "reporting"
    DONE = "done"  # an outcome was reported
    DROPPED = "dropped"  # never started (cancelled, stale, revoked, lease not acked, shutdown)
    ABANDONED = "abandoned"  # started, lease lost: stopped itself and reported nothing more


_TRANSITIONS: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.HELD: frozenset({RunPhase.QUEUED, RunPhase.DROPPED}),
    RunPhase.QUEUED: frozenset({RunPhase.CHECKING, RunPhase.DROPPED}),
    RunPhase.CHECKING: frozenset({RunPhase.LEASING, RunPhase.REPORTING, RunPhase.DROPPED}),
    RunPhase.LEASING: frozenset({RunPhase.RUNNING, RunPhase.DROPPED}),
    RunPhase.RUNNING: frozenset({RunPhase.REPORTING, RunPhase.ABANDONED}),
    RunPhase.REPORTING: frozenset({RunPhase.DONE, RunPhase.ABANDONED}),
    RunPhase.DONE: frozenset(),
    RunPhase.DROPPED: frozenset(),
    RunPhase.ABANDONED: frozenset(),
}
_NO_SECRETS = Scrubber()  # what most runs use: building one per run showed in profiles
UNSTARTED = frozenset({RunPhase.HELD, RunPhase.QUEUED, RunPhase.CHECKING})
FINAL = frozenset({RunPhase.DONE, RunPhase.DROPPED, RunPhase.ABANDONED})


class InvalidTransitionError(RuntimeError):
    pass


class StopKind(StrEnum):
    CANCELLED = "cancelled"  # a RunCancelled for this attempt
    SHUTDOWN = "shutdown"  # the worker is stopping and the grace period is over


@dataclass(eq=False)
class ActiveRun:
    """A RunDue this worker holds, with where it came from and how far it got."""

    due: RunDue
    tp: Any  # aiokafka TopicPartition of the RunDue
    offset: int
    phase: RunPhase = RunPhase.HELD
    stop_kind: StopKind | None = None
    stop_reason: str = ""
    release_offset: bool = True  # on finish, may the offset be committed past?
    drop_reason: str = ""
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    lease_settled: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Live runs per phase, kept by the pool so it need not scan every run on each poll.
    phases: Counter[RunPhase] | None = None
    on_stop: Callable[[], None] | None = None  # set while executing: a stop request ends the race

    @property
    def key(self) -> tuple[str, int]:
        return self.due.run_id, self.due.attempt

    @functools.cached_property
    def start_by_ms(self) -> int:
        """When the processor re-dispatches it unless it was started (parsed from its flags once)."""
        return start_deadline_ms(self.due)

    def advance(self, to: RunPhase) -> None:
        if to not in _TRANSITIONS[self.phase]:
            raise InvalidTransitionError(f"run {self.due.run_id}/{self.due.attempt}: {self.phase} -> {to}")
        if self.phases is not None:
            self.phases[self.phase] -= 1
            self.phases[to] += 1
        self.phase = to

    def request_stop(self, kind: StopKind, reason: str) -> None:
        if self.stop_kind is None:
            self.stop_kind, self.stop_reason = kind, reason
        self.stop_requested.set()
        if self.on_stop is not None:
            self.on_stop()

    def drop(self, reason: str, *, release_offset: bool) -> None:
        """Abandon an unstarted run (its task is cancelled); keep the offset held unless released."""
        self.drop_reason = reason
        self.release_offset = release_offset
        if self.task is not None:
            self.task.cancel()


class OutcomeSink(Protocol):
    async def outcome(self, event: Outcome) -> None: ...

    async def log(self, chunk: LogChunk) -> None: ...


class PoolPort(Protocol):
    """What a run needs from the pool consumer that received it."""

    pool: str
    team_gate: TeamGate

    async def may_start(self, run: ActiveRun) -> bool: ...

    def mark_started(self, run: ActiveRun) -> None: ...

    def lease_acked(self, run: ActiveRun) -> None: ...


@dataclass(frozen=True)
class Services:
    """What every run of a worker process shares."""

    config: WorkerConfig
    sink: OutcomeSink
    clock: Callable[[], int]
    metrics: WorkerMetrics
    secrets: SecretStore
    registry: ExecutorRegistry
    executor_env: ExecutorEnv
    slots: contextlib.AbstractAsyncContextManager[Any]  # executions in flight (tenancy.Slots)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


class Ending(StrEnum):
    FINISHED = "finished"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True, slots=True)
class _Built:
    executor: Executor
    scrubber: Scrubber


@dataclass(frozen=True, slots=True)
class _Report:
    """What step 7 sends for an attempt: its logs, if it ran, then its one outcome."""

    outcome: Callable[[], Outcome]  # built when sent, after the logs, so at_ms is then
    deadline_ms: int  # the lease's stop point: nothing of the attempt is sent after it
    logs: _LogShipper | None = None


@functools.lru_cache(maxsize=256)
def _policy(lease_ms: int) -> LeasePolicy:
    return LeasePolicy(lease_ms)  # immutable, and jobs share a handful of lease lengths


class RunDriver:
    def __init__(self, services: Services, pool: PoolPort) -> None:
        self.s = services
        self.pool = pool
        self.alarm = Alarm(services.clock, services.sleep)
        self._metric = LabelCache()

    async def drive(self, run: ActiveRun) -> None:
        """Take one RunDue through the steps in the module docstring."""
        try:
            # Step 1
            if not await self._hold(run):
                return
            run.advance(RunPhase.QUEUED)
            # Step 2
            async with self.pool.team_gate.slot(run.due.team), self.s.slots:
                report = await self._start(run)
            # Step 7
            if report is not None:
                await self._report(run, report)
        except asyncio.CancelledError:
            self.cancelled(run)
            raise
        except Exception:
            log.exception("run %s attempt %d: driver failed", *run.key)

    def cancelled(self, run: ActiveRun) -> None:
        """The drive task was cancelled (maybe before it ever ran): an unstarted run is dropped."""
        if run.phase in UNSTARTED:
            self._drop(run, run.drop_reason or "cancelled")

    async def _start(self, run: ActiveRun) -> _Report | None:
        """Steps 3 to 6, in the slots; what step 7 must report, if anything."""
        run.advance(RunPhase.CHECKING)
        # Step 3
        if not await self.pool.may_start(run):
            self._drop(run, "cancelled")
            return None
        if self._stale(run):
            return None
        # Step 4
        built = self._build(run)
        if isinstance(built, ExecResult):
            return self._unstarted(run, built)
        # Steps 5 and 6
        return await self._lease_and_execute(run, built)

    # -- steps 1 to 4 ----------------------------------------------------------------

    async def _hold(self, run: ActiveRun) -> bool:
        """Step 1. One alarm for all held runs: a hot instant releases them in one wake-up."""
        await self.alarm.until(run.due.not_before_ms)
        return not self._stale(run)

    def _stale(self, run: ActiveRun) -> bool:
        """Past its start deadline the processor re-dispatches it: starting now would race that."""
        if self.s.clock() < run.start_by_ms:
            return False
        self._drop(run, "stale")
        return True

    def _drop(self, run: ActiveRun, reason: str) -> None:
        run.advance(RunPhase.DROPPED)
        self._metric(self.s.metrics.runs_dropped, self.pool.pool, reason).inc()
        log.info("run %s attempt %d not started: %s", *run.key, reason)

    def _build(self, run: ActiveRun) -> _Built | ExecResult:
        """Step 4: the executor, or the non-retryable failure to report instead."""
        scrubber = _NO_SECRETS
        try:
            raw = json.loads(run.due.executor.config_json)
            config, used = resolve(raw, self.s.secrets)
            scrubber = Scrubber(used) if used else _NO_SECRETS
            executor = self.s.registry.build(run.due.executor.kind, config, self.s.executor_env)
        except json.JSONDecodeError as exc:
            return ExecResult.failure(
                "ExecutorConfigError", f"config_json is not JSON: {exc}", retryable=False
            )
        except SecretNotFound as exc:
            return ExecResult.failure("SecretNotFound", str(exc), retryable=False)
        except ExecutorConfigError as exc:
            return ExecResult.failure("ExecutorConfigError", scrubber.scrub(str(exc)), retryable=False)
        return _Built(executor, scrubber)

    def _unstarted(self, run: ActiveRun, result: ExecResult) -> _Report:
        run.advance(RunPhase.REPORTING)
        self.pool.mark_started(run)  # a redelivery must not report it again
        return _Report(
            lambda: self._failed(run, result.retryable, result.error_class, result.error_message),
            deadline_ms=self.s.clock() + run.due.lease_ms,
        )

    # -- step 5: the lease --------------------------------------------------------------

    async def _lease_and_execute(self, run: ActiveRun, built: _Built) -> _Report | None:
        run.advance(RunPhase.LEASING)
        self.pool.mark_started(run)
        policy = _policy(run.due.lease_ms)
        now = self.s.clock()
        lease = granted(policy, now)
        try:
            started = RunStarted(
                run.due.run_id,
                run.due.job_id,
                run.due.attempt,
                self.s.config.worker_id,
                lease.lease_until_ms,
                now,
            )
            async with asyncio.timeout((stop_at_ms(policy, lease) - now) / 1000):
                await self.s.sink.outcome(started)  # returns once the broker acknowledged it
        except Exception as exc:  # noqa: BLE001 - no ack for any reason means no execution
            self._metric(self.s.metrics.leases_not_acked, self.pool.pool).inc()
            self._drop(run, "lease_not_acked")
            log.warning("run %s attempt %d: RunStarted not acknowledged (%r); not started", *run.key, exc)
            return None
        finally:
            run.lease_settled.set()
        self.pool.lease_acked(run)
        self._metric(self.s.metrics.runs_started, self.pool.pool).inc()
        run.advance(RunPhase.RUNNING)
        # Step 5b: the cancel rule once more, as of a moment after the lease is on the broker.
        # A cancel acknowledged before the RunStarted was written is now certainly read, so
        # the executor is never called after a cancel's ack, however long steps 3-5 took.
        if not await self.pool.may_start(run):
            run.request_stop(StopKind.CANCELLED, "cancelled while the lease was being written")
        keeper = LeaseKeeper(
            policy, lease, renew=self._heartbeat_sender(run), clock=self.s.clock, sleep=self.s.sleep
        )
        return await self._execute(run, built, keeper)

    def _heartbeat_sender(self, run: ActiveRun) -> Callable[[int, int], Awaitable[None]]:
        async def send(lease_until_ms: int, at_ms: int) -> None:
            beat = RunHeartbeat(
                run.due.run_id,
                run.due.job_id,
                run.due.attempt,
                self.s.config.worker_id,
                lease_until_ms,
                at_ms,
            )
            await self.s.sink.outcome(beat)

        return send

    # -- step 6: execution --------------------------------------------------------------

    async def _execute(self, run: ActiveRun, built: _Built, keeper: LeaseKeeper) -> _Report | None:
        failpoints.hit("worker_before_call")
        logs = _LogShipper(self.s.sink, lambda on_ready: self._capture(run, built.scrubber, on_ready))
        try:
            ctx = RunContext(
                run.due.run_id,
                run.due.job_id,
                run.due.attempt,
                run.due.team,
                logs,
                idempotency_key=run.due.run_id,
            )
            ending, result = await self._timed_race(run, built.executor, ctx, keeper)
            failpoints.hit("worker_after_call_before_outcome")
        except BaseException:
            await logs.abandon()  # stops the shipper on any way out but a report
            raise
        if ending is Ending.LEASE_LOST or not keeper.valid():
            await logs.abandon()
            self._abandon(run, keeper)
            return None
        run.advance(RunPhase.REPORTING)
        return _Report(
            lambda: self._outcome(run, ending, result, built.scrubber),
            deadline_ms=stop_at_ms(keeper.policy, keeper.state),
            logs=logs,
        )

    async def _timed_race(
        self, run: ActiveRun, executor: Executor, ctx: RunContext, keeper: LeaseKeeper
    ) -> tuple[Ending, ExecResult | BaseException | None]:
        in_flight = self._metric(self.s.metrics.in_flight, self.pool.pool)
        in_flight.inc()
        started = time.monotonic()
        try:
            return await self._race(run, executor, ctx, keeper)
        finally:
            in_flight.dec()
            seconds = self._metric(self.s.metrics.executor_seconds, self.pool.pool, run.due.executor.kind)
            seconds.observe(time.monotonic() - started)

    def _capture(self, run: ActiveRun, scrubber: Scrubber, on_ready: Callable[[], None]) -> OutputCapture:
        cfg = self.s.config
        return OutputCapture(
            run.due.run_id,
            run.due.job_id,
            run.due.attempt,
            limit_bytes=cfg.log_limit_bytes,
            chunk_bytes=cfg.log_chunk_bytes,
            scrubber=scrubber,
            clock=self.s.clock,
            on_ready=on_ready,
        )

    async def _race(
        self, run: ActiveRun, executor: Executor, ctx: RunContext, keeper: LeaseKeeper
    ) -> tuple[Ending, ExecResult | BaseException | None]:
        """Run the executor against its lease, its timeout and stop requests; stop it if it loses."""
        if run.stop_requested.is_set():
            return Ending.STOPPED, None  # cancelled while the lease was being acked: do not begin
        if not keeper.valid():
            return Ending.LEASE_LOST, None  # frozen between the ack and here: too late to begin
        first: asyncio.Future[Ending] = asyncio.get_running_loop().create_future()

        def end(ending: Ending) -> None:
            if not first.done():
                first.set_result(ending)

        exec_task = asyncio.create_task(executor.run(ctx))
        exec_task.add_done_callback(lambda _: end(Ending.FINISHED))
        watch = _Watch(keeper, run.due.timeout_ms / 1000, end)
        run.on_stop = lambda: end(Ending.STOPPED)
        try:
            ending = await first
        finally:
            run.on_stop = None
            watch.cancel()
            if not exec_task.done():
                await self._stop_execution(run, exec_task)
            elif not exec_task.cancelled():
                exec_task.exception()  # retrieved even when a rival won: asyncio would log it
            await watch.stopped()  # nothing of this attempt outlives it
        if ending is Ending.FINISHED:
            error = exec_task.exception()
            if error is not None:
                log.error("run %s attempt %d: executor raised", *run.key, exc_info=error)
            return ending, error or exec_task.result()
        return ending, None

    async def _stop_execution(self, run: ActiveRun, task: asyncio.Task[ExecResult]) -> None:
        task.cancel()
        grace_s = self.s.config.kill_grace_ms / 1000 + 5
        done, _ = await asyncio.wait({task}, timeout=grace_s)
        if not done:
            log.error("run %s attempt %d: executor still running %.0f s after cancel", *run.key, grace_s)
        elif not task.cancelled() and task.exception() is not None:
            log.warning("run %s attempt %d: executor failed while stopping: %r", *run.key, task.exception())

    def _abandon(self, run: ActiveRun, keeper: LeaseKeeper) -> None:
        run.advance(RunPhase.ABANDONED)
        self._metric(self.s.metrics.lease_self_stops, self.pool.pool).inc()
        log.warning(
            "run %s attempt %d: lease lost (until %d, now %d); execution stopped, nothing reported",
            *run.key,
            keeper.state.lease_until_ms,
            self.s.clock(),
        )

    # -- step 7: the outcome --------------------------------------------------------------

    async def _report(self, run: ActiveRun, report: _Report) -> None:
        """Logs first, then the one outcome, each within the lease's stop point."""
        try:
            if report.logs is not None:
                timeout_s = max(0.0, (report.deadline_ms - self.s.clock()) / 1000)
                await report.logs.finish(timeout_s=timeout_s)
            await self._send_final(run, report.outcome(), deadline_ms=report.deadline_ms)
        finally:
            if report.logs is not None:
                await report.logs.abandon()  # a no-op once finished

    def _outcome(
        self, run: ActiveRun, ending: Ending, result: ExecResult | BaseException | None, scrubber: Scrubber
    ) -> Outcome:
        due, now = run.due, self.s.clock()
        if ending is Ending.TIMED_OUT:
            return RunTimedOut(due.run_id, due.job_id, due.attempt, self.s.config.worker_id, now)
        if ending is Ending.STOPPED:
            if run.stop_kind is StopKind.SHUTDOWN:
                return self._failed(run, True, "WorkerShutdown", run.stop_reason)
            return self._failed(run, False, "Cancelled", run.stop_reason)
        if isinstance(result, BaseException):
            return self._failed(run, True, type(result).__name__, scrubber.scrub(str(result)))
        assert result is not None
        if result.ok:
            text = utf8_prefix(scrubber.scrub(result.result), self.s.config.result_max_bytes)
            return RunSucceeded(due.run_id, due.job_id, due.attempt, self.s.config.worker_id, now, text)
        return self._failed(run, result.retryable, result.error_class, scrubber.scrub(result.error_message))

    def _failed(self, run: ActiveRun, retryable: bool, error_class: str, message: str) -> RunFailed:
        due = run.due
        return RunFailed(
            due.run_id,
            due.job_id,
            due.attempt,
            self.s.config.worker_id,
            self.s.clock(),
            retryable,
            error_class,
            message,
        )

    async def _send_final(self, run: ActiveRun, event: Outcome, *, deadline_ms: int) -> None:
        try:
            timeout_s = max(0.001, (deadline_ms - self.s.clock()) / 1000)
            async with asyncio.timeout(timeout_s):
                await self.s.sink.outcome(event)
        except Exception as exc:  # noqa: BLE001 - the lease will lapse and the processor re-dispatches
            log.warning(
                "run %s attempt %d: outcome %s not acknowledged: %r", *run.key, type(event).__name__, exc
            )
            run.advance(RunPhase.ABANDONED)
            return
        run.advance(RunPhase.DONE)
        self._count(event)

    def _count(self, event: Outcome) -> None:
        m, pool = self.s.metrics, self.pool.pool
        if isinstance(event, RunSucceeded):
            self._metric(m.runs_succeeded, pool).inc()
        elif isinstance(event, RunTimedOut):
            self._metric(m.runs_timed_out, pool).inc()
        elif isinstance(event, RunFailed):
            self._metric(m.runs_failed, pool, str(event.retryable).lower()).inc()
            if event.error_class == "Cancelled":
                self._metric(m.runs_cancelled, pool).inc()


class _Watch:
    """An execution's timeout and lease keeper, on one timer until the execution outlives it.

    The timer fires at the job's timeout or when the keeper, started now, would first wake
    (the lease was just granted: until then it would only sleep), whichever is sooner. Only
    then does the keeper get a task. Most executions of a hot instant end before that, and
    a task each, created only to be cancelled, was a good part of their cost.
    """

    def __init__(self, keeper: LeaseKeeper, timeout_s: float, end: Callable[[Ending], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._keeper = keeper
        self._end = end
        self._timeout_at = self._loop.time() + timeout_s
        self._task: asyncio.Task[str] | None = None
        wake_at = min(self._timeout_at, self._loop.time() + keeper.idle_ms() / 1000)
        self._timer = self._loop.call_at(wake_at, self._wake)

    def _wake(self) -> None:
        if self._loop.time() >= self._timeout_at:
            self._end(Ending.TIMED_OUT)
            return
        if self._task is None:
            self._task = asyncio.create_task(self._keeper.keep())
            self._task.add_done_callback(self._lease_ended)
        self._timer = self._loop.call_at(self._timeout_at, self._wake)

    def _lease_ended(self, task: asyncio.Task[str]) -> None:
        if not task.cancelled():
            self._end(Ending.LEASE_LOST)

    def cancel(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        """Until the keeper (if it was started) has stopped."""
        if self._task is not None:
            await asyncio.wait({self._task})


class _LogShipper:
    """An attempt's output: captured, and sent as LogChunks in order as they are cut.

    The capture and the task that sends its chunks are made by the first write: most runs
    of a hot instant print nothing and need neither.
    """

    def __init__(self, sink: OutcomeSink, new_capture: Callable[[Callable[[], None]], OutputCapture]) -> None:
        self.sink = sink
        self._new_capture = new_capture
        self._capture: OutputCapture | None = None
        self._ready: asyncio.Event | None = None  # set whenever the capture cuts a chunk
        self._closing = False
        self._sealed = False  # finished or abandoned: nothing written or cut from now on is sent
        self._task: asyncio.Task[None] | None = None

    def write(self, text: str) -> None:
        """The executor's output (``RunContext.output``)."""
        if self._sealed:
            return
        if self._capture is None:
            self._ready = asyncio.Event()
            self._capture = self._new_capture(self._cut)
        self._capture.write(text)

    def _cut(self) -> None:
        assert self._ready is not None  # made with the capture
        self._ready.set()
        if self._task is None and not self._sealed:
            self._task = asyncio.create_task(self._ship())

    async def _ship(self) -> None:
        # Only a cut starts this task, and the capture (with its event) exists by then.
        assert self._capture is not None
        assert self._ready is not None
        while True:
            await self._ready.wait()
            self._ready.clear()
            for chunk in self._capture.take():
                await self.sink.log(chunk)
            if self._closing and not self._ready.is_set():
                return

    async def finish(self, timeout_s: float) -> None:
        """Flush what the capture still holds and wait (bounded) until it is sent."""
        if self._capture is not None:
            self._capture.close()  # may cut a last chunk, which starts the task
        self._closing = self._sealed = True
        if self._task is None or self._ready is None:
            return  # nothing was ever cut
        self._ready.set()
        await asyncio.wait({self._task}, timeout=timeout_s)
        if not self._task.done() or self._task.cancelled() or self._task.exception() is not None:
            log.warning("log chunks not all sent before the outcome")  # lost logs must not cost it
            await self.abandon()

    async def abandon(self) -> None:
        """Send nothing more."""
        self._sealed = True
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
