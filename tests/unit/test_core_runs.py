"""Runs after dispatch: outcomes and fencing, retries, leases, timeouts, dead letters."""

from __future__ import annotations

import json

from tests.unit.core_harness import HOUR, MINUTE, SECOND, T0, Harness, cron, once
from tickwheel.schemas.model import (
    DeadLetter,
    JobChanged,
    JobStatus,
    RetryPolicy,
    RunCancelled,
    RunDue,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunStatus,
    RunSucceeded,
    RunTrigger,
    SkipReason,
)
from tickwheel.streams.core import HISTORY_CAP, CoreConfig, evolve, published
from tickwheel.streams.retry import backoff_ms
from tickwheel.streams.timers import Timer, TimerKind

RETRY = RetryPolicy(max_attempts=3, backoff_initial_ms=10 * SECOND, backoff_max_ms=25 * SECOND,
                    backoff_multiplier=2.0, jitter=0.2)


def _dispatched(**overrides: object) -> Harness:
    """A one-time job whose single run has just been dispatched at T0."""
    h = Harness(now=T0 - SECOND)
    h.create(once(T0, **{"retry": RETRY, "timeout_ms": 10 * MINUTE, **overrides}))
    h.advance(T0)
    return h


# ---------------------------------------------------------------------------
# Start, heartbeat, success


def test_run_started_takes_the_lease_and_arms_lease_and_timeout_timers() -> None:
    """RunStarted: RUNNING, worker id, lease_until, deadline = at + timeout; two timers."""
    h = _dispatched()
    run_id = h.only_run().run_id
    h.now = T0 + 2 * SECOND
    events = h.start(worker="w1", lease_ms=30 * SECOND)
    assert [type(e) for e in events] == [RunStarted]
    assert published(events) == []  # already on the outcomes topic
    run = h.only_run()
    assert (run.status, run.worker_id) == (RunStatus.RUNNING, "w1")
    assert run.lease_until_ms == T0 + 32 * SECOND
    assert run.deadline_ms == T0 + 2 * SECOND + 10 * MINUTE
    assert h.timers() == {
        Timer(T0 + 32 * SECOND, "job-1", TimerKind.LEASE, run_id),
        Timer(T0 + 2 * SECOND + 10 * MINUTE, "job-1", TimerKind.TIMEOUT, run_id),
    }


def test_a_second_start_of_the_same_attempt_is_ignored() -> None:
    """One lease per (run id, attempt): another worker's RunStarted produces no events."""
    h = _dispatched()
    h.start(worker="w1")
    before = h.state
    assert h.start(worker="w2") == []
    assert h.start(worker="w1") == []
    assert h.state == before


def test_outcomes_for_unknown_runs_or_other_attempts_are_ignored() -> None:
    """Fencing: an unknown run id, an older or newer attempt, or another job: no events."""
    h = _dispatched()
    before = h.state
    run_id = h.only_run().run_id
    assert h.apply(RunStarted("r-unknown", "job-1", 1, "w1", T0 + MINUTE, T0)) == []
    assert h.apply(RunStarted(run_id, "job-1", 2, "w1", T0 + MINUTE, T0)) == []
    assert h.apply(RunStarted(run_id, "job-1", 0, "w1", T0 + MINUTE, T0)) == []
    assert h.apply(RunStarted(run_id, "job-2", 1, "w1", T0 + MINUTE, T0)) == []
    assert h.state == before


def test_heartbeat_from_the_lease_holder_extends_the_lease() -> None:
    """RunHeartbeat from the holder moves lease_until (and the LEASE timer) later."""
    h = _dispatched()
    h.start(worker="w1", lease_ms=30 * SECOND)
    old = h.timer(TimerKind.LEASE)
    h.now = T0 + 20 * SECOND
    assert len(h.heartbeat(worker="w1", lease_ms=30 * SECOND)) == 1
    assert h.only_run().lease_until_ms == T0 + 50 * SECOND
    assert h.timer(TimerKind.LEASE).due_ms == T0 + 50 * SECOND
    h.now = old.due_ms
    assert h.apply(old) == []  # the old lease timer is stale now


def test_heartbeat_from_another_worker_is_ignored() -> None:
    """Only the lease holder can extend the lease."""
    h = _dispatched()
    h.start(worker="w1")
    before = h.state
    assert h.heartbeat(worker="w2", lease_ms=HOUR) == []
    assert h.state == before


def test_success_settles_the_run_and_resets_consecutive_failures() -> None:
    """RunSucceeded: RunSettled(SUCCEEDED), the run leaves the state, failures reset to 0."""
    h = Harness(now=T0)
    h.create(cron("* * * * *", retry=RetryPolicy(max_attempts=1)))
    h.advance(T0)
    h.fail(retryable=False)
    assert h.job.consecutive_failures == 1
    h.advance(T0 + MINUTE)
    h.start()
    h.now += 5 * SECOND
    events = h.succeed()
    settled = h.of(RunSettled, events)[0]
    assert (settled.status, settled.attempts, settled.scheduled_for_ms) == (
        RunStatus.SUCCEEDED, 1, T0 + MINUTE)
    assert h.job.runs == ()
    assert h.job.consecutive_failures == 0


def test_success_from_a_non_holder_is_ignored_while_running() -> None:
    """A result from a worker that does not hold the lease is fenced off."""
    h = _dispatched()
    h.start(worker="w1")
    assert h.succeed(worker="w2") == []
    assert h.only_run().status is RunStatus.RUNNING


def test_a_result_without_a_start_is_accepted_while_due() -> None:
    """A worker may report a result without a RunStarted; it is still the attempt's result."""
    h = _dispatched()
    events = h.succeed(worker="fast")
    assert h.of(RunSettled, events)[0].status is RunStatus.SUCCEEDED


def test_a_second_result_for_a_settled_run_is_ignored() -> None:
    """Once settled, further outcomes for the run produce nothing."""
    h = Harness(now=T0)
    h.create()
    h.advance(T0)
    run_id = h.only_run().run_id
    h.start()
    h.succeed()
    assert h.apply(RunSucceeded(run_id, "job-1", 1, "w1", h.now)) == []


# ---------------------------------------------------------------------------
# Failure, retry, backoff, dead letter


def test_retryable_failure_waits_for_a_backoff_then_redispatches() -> None:
    """RunFailed(retryable) → RETRY_WAIT at at + backoff; the RETRY timer → RunDue(RETRY, 2)."""
    h = _dispatched()
    run_id = h.only_run().run_id
    h.start()
    h.now = T0 + 5 * SECOND
    events = h.fail()
    assert h.of(RunSettled, events) == []
    run = h.only_run()
    wait = backoff_ms(RETRY, run_id, 1)
    assert (run.status, run.retry_at_ms) == (RunStatus.RETRY_WAIT, T0 + 5 * SECOND + wait)
    assert h.timers() == {Timer(T0 + 5 * SECOND + wait, "job-1", TimerKind.RETRY, run_id)}
    (due,) = h.dues(h.advance(T0 + 5 * SECOND + wait))
    assert (due.run_id, due.attempt, due.trigger) == (run_id, 2, RunTrigger.RETRY)
    assert due.not_before_ms == due.emitted_at_ms == T0 + 5 * SECOND + wait
    assert h.only_run().status is RunStatus.DUE


def test_backoff_grows_exponentially_and_is_capped() -> None:
    """Successive retry delays follow initial * 2^(n-1), capped, each within ±jitter."""
    h = Harness(now=T0 - SECOND)
    policy = RetryPolicy(max_attempts=6, backoff_initial_ms=10 * SECOND,
                         backoff_max_ms=35 * SECOND, backoff_multiplier=2.0, jitter=0.2)
    h.create(once(T0, retry=policy))
    h.advance(T0)
    delays = []
    for _ in range(5):
        h.start()
        failed_at = h.now
        h.fail()
        delays.append(h.only_run().retry_at_ms - failed_at)
        h.advance(h.only_run().retry_at_ms)
    for delay, base in zip(delays, [10, 20, 35, 35, 35], strict=True):
        assert base * 800 <= delay <= base * 1200
    assert delays == [backoff_ms(policy, h.only_run().run_id, n) for n in range(1, 6)]


def test_exhausted_attempts_settle_failed_and_dead_letter_with_history() -> None:
    """After max_attempts failures: RunSettled(FAILED) + DeadLetter(runs) with every attempt."""
    h = _dispatched()
    run_id = h.only_run().run_id
    for _ in range(2):
        h.start()
        h.fail()
        h.advance(h.only_run().retry_at_ms)
    h.start(worker="w9")
    events = h.fail(worker="w9")
    settled = h.of(RunSettled, events)[0]
    assert (settled.status, settled.attempts) == (RunStatus.FAILED, 3)
    (letter,) = h.of(DeadLetter, events)
    assert letter.source_topic == "runs"
    assert letter.key == b"job-1"
    assert letter.reason.startswith(f"attempts_exhausted: run {run_id} after 3 attempt(s)")
    history = json.loads(letter.history_json)
    assert [(r["attempt"], r["outcome"]) for r in history] == [
        (1, "failed"), (2, "failed"), (3, "failed")]
    assert history[2]["worker_id"] == "w9"
    assert history[2]["error"] == "Boom: it broke"
    assert h.job.consecutive_failures == 1
    assert h.job.status is JobStatus.COMPLETED  # the one-time job's only run settled


def test_a_non_retryable_failure_dead_letters_at_once() -> None:
    """RunFailed(retryable=False) settles FAILED on the first attempt."""
    h = _dispatched()
    h.start()
    events = h.fail(retryable=False)
    assert h.of(RunSettled, events)[0].status is RunStatus.FAILED
    assert h.of(DeadLetter, events)[0].reason.startswith("not_retryable: ")


def test_worker_reported_timeout_is_a_retryable_failure() -> None:
    """RunTimedOut → RETRY_WAIT, recorded as timed_out with error class timeout."""
    h = _dispatched()
    h.start()
    assert h.of(RunSettled, h.timed_out()) == []
    run = h.only_run()
    assert run.status is RunStatus.RETRY_WAIT
    assert (run.history[-1].outcome, run.history[-1].error) == ("timed_out", "timeout")


def test_worker_reported_timeout_on_the_last_attempt_settles_timed_out() -> None:
    """A final RunTimedOut settles TIMED_OUT and is dead-lettered."""
    h = _dispatched(retry=RetryPolicy(max_attempts=1))
    h.start()
    events = h.timed_out()
    assert h.of(RunSettled, events)[0].status is RunStatus.TIMED_OUT
    assert len(h.of(DeadLetter, events)) == 1


def test_a_stale_attempt_failure_is_ignored_after_a_retry() -> None:
    """After the retry dispatched attempt 2, a late RunFailed for attempt 1 does nothing."""
    h = _dispatched()
    h.start()
    h.fail()
    h.advance(h.only_run().retry_at_ms)
    before = h.state
    assert h.fail(attempt=1) == []
    assert h.state == before


def test_history_is_capped() -> None:
    """A run keeps at most HISTORY_CAP attempt records (the newest)."""
    h = _dispatched(retry=RetryPolicy(max_attempts=30, backoff_initial_ms=0, backoff_max_ms=0))
    for _ in range(29):
        h.start()
        h.fail()
        h.advance(h.only_run().retry_at_ms)
    run = h.only_run()
    assert run.attempt == 30
    assert len(run.history) == HISTORY_CAP
    assert run.history[-1].attempt == 29


# ---------------------------------------------------------------------------
# Run timers: TIMEOUT, LEASE (running), LEASE (start deadline), RETRY


def test_timeout_timer_cancels_the_attempt_then_retries() -> None:
    """TIMEOUT → RunCancelled(timeout) for the attempt, then RETRY_WAIT like RunTimedOut."""
    h = _dispatched()
    h.start(lease_ms=HOUR)
    deadline = h.only_run().deadline_ms
    events = h.advance(deadline)
    assert events == [RunCancelled(h.only_run().run_id, "job-1", 1, "timeout", deadline)]
    run = h.only_run()
    assert run.status is RunStatus.RETRY_WAIT
    assert run.retry_at_ms == deadline + backoff_ms(RETRY, run.run_id, 1)


def test_timeout_timer_on_the_last_attempt_settles_timed_out() -> None:
    """A final timeout: RunCancelled(timeout), RunSettled(TIMED_OUT), DeadLetter."""
    h = _dispatched(retry=RetryPolicy(max_attempts=1))
    h.start(lease_ms=HOUR)
    events = h.advance(h.only_run().deadline_ms)
    assert [type(e) for e in events[:3]] == [RunCancelled, RunSettled, DeadLetter]
    assert h.of(RunSettled, events)[0].status is RunStatus.TIMED_OUT


def test_lease_expiry_redispatches_at_once_with_the_next_attempt() -> None:
    """LEASE (running) → RunCancelled(lease_expired) + RunDue(LEASE_EXPIRED, attempt+1, now)."""
    h = _dispatched()
    run_id = h.only_run().run_id
    h.start(worker="w1", lease_ms=30 * SECOND)
    events = h.advance(T0 + 30 * SECOND)
    cancelled, due = events
    assert cancelled == RunCancelled(run_id, "job-1", 1, "lease_expired", T0 + 30 * SECOND)
    assert isinstance(due, RunDue)
    assert (due.attempt, due.trigger) == (2, RunTrigger.LEASE_EXPIRED)
    assert due.not_before_ms == T0 + 30 * SECOND  # no backoff
    assert h.only_run().history[-1].outcome == "lease_expired"
    # The vanished worker's late report is fenced off by the attempt number.
    assert h.succeed(worker="w1", attempt=1) == []


def test_start_deadline_expiry_redispatches() -> None:
    """LEASE on a DUE run (nobody started it) → RunCancelled(start_timeout) + next attempt."""
    h = Harness(now=T0 - SECOND, cfg=CoreConfig(start_timeout_ms=2 * MINUTE))
    h.create(once(T0))
    h.advance(T0)
    cancelled, due = h.advance(T0 + 2 * MINUTE)
    assert isinstance(cancelled, RunCancelled)
    assert cancelled.reason == "start_timeout"
    assert isinstance(due, RunDue)
    assert due.attempt == 2


def test_lease_expiry_on_the_last_attempt_settles_failed() -> None:
    """With no attempts left a lapsed lease settles FAILED and dead-letters."""
    h = _dispatched(retry=RetryPolicy(max_attempts=1))
    h.start(lease_ms=30 * SECOND)
    events = h.advance(T0 + 30 * SECOND)
    assert [type(e) for e in events[:3]] == [RunCancelled, RunSettled, DeadLetter]
    assert h.of(RunSettled, events)[0].status is RunStatus.FAILED
    history = json.loads(h.of(DeadLetter, events)[0].history_json)
    assert history[-1]["outcome"] == "lease_expired"


def test_stale_run_timers_do_nothing() -> None:
    """A LEASE/TIMEOUT/RETRY timer the state no longer implies produces no events."""
    h = _dispatched()
    run_id = h.only_run().run_id
    h.start(lease_ms=30 * SECOND)
    before = h.state
    h.now = T0 + HOUR
    for kind in (TimerKind.LEASE, TimerKind.TIMEOUT, TimerKind.RETRY):
        assert h.apply(Timer(T0 + 1, "job-1", kind, run_id)) == []
    assert h.apply(Timer(T0 + 30 * SECOND, "job-1", TimerKind.LEASE, "r-other")) == []
    assert h.state == before


# ---------------------------------------------------------------------------
# Auto-pause


def test_consecutive_failed_runs_auto_pause_the_job() -> None:
    """auto_pause_after=2: the second failed run in a row pauses the job (JobChanged auto_paused)."""
    h = Harness(now=T0)
    h.create(cron("* * * * *", retry=RetryPolicy(max_attempts=1), auto_pause_after=2))
    h.advance(T0)
    h.fail(retryable=False)
    assert h.status() is JobStatus.ACTIVE
    h.advance(T0 + MINUTE)
    events = h.fail(retryable=False)
    (paused,) = h.of(JobChanged, events)
    assert (paused.change, paused.status, paused.command_id) == ("auto_paused", JobStatus.PAUSED, "")
    assert h.status() is JobStatus.PAUSED
    skipped = h.of(RunSkipped, h.advance(T0 + 2 * MINUTE))
    assert [s.reason for s in skipped] == [SkipReason.PAUSED]


def test_resume_after_auto_pause_resets_the_failure_count() -> None:
    """Leaving PAUSED resets consecutive_failures, so one more failure does not re-pause."""
    h = Harness(now=T0)
    h.create(cron("* * * * *", retry=RetryPolicy(max_attempts=1), auto_pause_after=2))
    for i in range(2):
        h.advance(T0 + i * MINUTE)
        h.fail(retryable=False)
    h.resume()
    assert h.job.consecutive_failures == 0
    h.advance(T0 + 2 * MINUTE)
    h.fail(retryable=False)
    assert h.job.status is JobStatus.ACTIVE


def test_a_success_between_failures_prevents_auto_pause() -> None:
    """Only consecutive failures count."""
    h = Harness(now=T0)
    h.create(cron("* * * * *", retry=RetryPolicy(max_attempts=1), auto_pause_after=2))
    h.advance(T0)
    h.fail(retryable=False)
    h.advance(T0 + MINUTE)
    h.succeed()
    h.advance(T0 + 2 * MINUTE)
    h.fail(retryable=False)
    assert h.job.status is JobStatus.ACTIVE


# ---------------------------------------------------------------------------
# evolve on its own


def test_evolve_ignores_outcomes_decide_would_have_ignored() -> None:
    """Folding a stale outcome (as a replay of the whole outcomes topic would) changes nothing."""
    h = _dispatched()
    h.start(worker="w1")
    run_id = h.only_run().run_id
    stale = RunStarted(run_id, "job-1", 1, "w2", T0 + HOUR, T0)
    assert evolve(h.state, stale) == h.state
    assert evolve(None, stale) is None
