"""Leases: heartbeat schedule, backoff after failures, and the self-stop point (injected clock)."""

from __future__ import annotations

import pytest

from tickwheel import failpoints
from tickwheel.workers.lease import (
    LeaseKeeper,
    LeasePolicy,
    failed,
    granted,
    next_try_at_ms,
    stop_at_ms,
)


class FakeTime:
    """A settable clock whose sleep advances it instead of waiting."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now
        self.sleeps: list[int] = []

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds * 1000))
        self.now += round(seconds * 1000)


def test_policy_arithmetic() -> None:
    """Heartbeats every lease/3, stop lease/10 early (at most 5 s), backoff doubles up to interval/2."""
    policy = LeasePolicy(30_000)
    assert (policy.interval_ms, policy.margin_ms) == (10_000, 3_000)
    assert LeasePolicy(600_000).margin_ms == 5_000
    delays = [policy.retry_delay_ms(n) for n in (1, 2, 3, 4, 7, 60)]
    assert delays == [100, 200, 400, 800, 5_000, 5_000]
    state = granted(policy, 1_000)
    assert (state.lease_until_ms, stop_at_ms(policy, state), next_try_at_ms(policy, state)) == (
        31_000,
        28_000,
        11_000,
    )
    assert next_try_at_ms(policy, failed(failed(state, 11_000), 11_050)) == 11_250


async def test_heartbeats_on_schedule_extend_the_lease() -> None:
    """With acks, a heartbeat goes out every interval and each one moves lease_until."""
    time = FakeTime()
    sent: list[tuple[int, int]] = []

    async def renew(until: int, at: int) -> None:
        sent.append((until, at))
        if len(sent) >= 4:
            raise OSError("broker gone")  # from here on the lease is lost

    policy = LeasePolicy(3_000)
    start = time.now
    keeper = LeaseKeeper(policy, granted(policy, start), renew=renew, clock=time.clock, sleep=time.sleep)
    reason = await keeper.keep()
    assert [at - start for _, at in sent[:3]] == [1_000, 2_000, 3_000]
    assert all(until == at + 3_000 for until, at in sent)
    assert keeper.renewals == 3
    assert "not renewed" in reason


async def test_failed_heartbeats_back_off_then_stop_before_the_lease_lapses() -> None:
    """Failures are retried with doubling delays; at lease_until - margin the keeper gives up."""
    time = FakeTime()
    tries: list[int] = []

    async def renew(until: int, at: int) -> None:
        tries.append(at)
        raise TimeoutError

    policy = LeasePolicy(3_000)
    start = time.now
    keeper = LeaseKeeper(policy, granted(policy, start), renew=renew, clock=time.clock, sleep=time.sleep)
    await keeper.keep()
    offsets = [t - start for t in tries]
    assert offsets == [1_000, 1_100, 1_300, 1_700, 2_200, 2_700][: len(offsets)]
    assert offsets[-1] < 3_000 - policy.margin_ms
    assert time.now == start + 3_000 - policy.margin_ms
    assert not keeper.valid()


async def test_a_late_ack_after_failures_renews_and_resets_the_backoff() -> None:
    """One success after failures extends the lease and brings back the normal interval."""
    time = FakeTime()
    results = iter([TimeoutError(), TimeoutError(), None, None])
    tries: list[int] = []

    async def renew(until: int, at: int) -> None:
        tries.append(at - start)
        outcome = next(results, OSError("stop here"))
        if outcome is not None:
            raise outcome

    policy = LeasePolicy(3_000)
    start = time.now
    keeper = LeaseKeeper(policy, granted(policy, start), renew=renew, clock=time.clock, sleep=time.sleep)
    await keeper.keep()
    assert tries[:5] == [1_000, 1_100, 1_300, 2_300, 3_300]


async def test_a_clock_jump_past_the_stop_point_sends_nothing() -> None:
    """A worker frozen past its lease (SIGSTOP, GC) stops without sending a late heartbeat."""
    time = FakeTime()
    sent: list[int] = []

    async def renew(until: int, at: int) -> None:
        sent.append(at)

    async def frozen_sleep(seconds: float) -> None:
        time.now += 60_000  # the process was stopped for a minute

    policy = LeasePolicy(3_000)
    keeper = LeaseKeeper(policy, granted(policy, time.now), renew=renew, clock=time.clock, sleep=frozen_sleep)
    await keeper.keep()
    assert sent == []
    assert not keeper.valid()


async def test_during_heartbeat_failpoint_freeze_stops_the_lease() -> None:
    """The during_heartbeat failpoint fires before each send; frozen past the stop point, none is sent."""
    time = FakeTime()
    sent: list[int] = []

    async def renew(until: int, at: int) -> None:
        sent.append(at)
        if len(sent) > 5:
            raise OSError("ends the test even if the failpoint never fires")

    failpoints.arm("during_heartbeat=raise@2")
    try:
        policy = LeasePolicy(3_000)
        keeper = LeaseKeeper(
            policy, granted(policy, time.now), renew=renew, clock=time.clock, sleep=time.sleep
        )
        with pytest.raises(failpoints.FailpointError):
            await keeper.keep()
    finally:
        failpoints.arm("")
    assert len(sent) == 1
