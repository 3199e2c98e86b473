"""The held-run alarm with an injected clock and sleep: one wake-up per instant, never late."""

from __future__ import annotations

import asyncio

import pytest

from tickwheel.workers.alarm import Alarm

NOW = 1_700_000_000_000


class SteppingTime:
    """A sleep advances the clock by exactly what was asked."""

    def __init__(self) -> None:
        self.now = NOW
        self.naps: list[int] = []

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.naps.append(round(seconds * 1000))
        self.now += round(seconds * 1000)
        await asyncio.sleep(0)


class HeldTime:
    """A sleep blocks until the test lets it end (or it is cancelled)."""

    def __init__(self) -> None:
        self.now = NOW
        self.naps: list[int] = []
        self.napping = asyncio.Event()
        self.nap_started = asyncio.Event()  # set by every sleep call
        self._wake = asyncio.Event()

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.naps.append(round(seconds * 1000))
        self._wake = asyncio.Event()
        self.napping.set()
        self.nap_started.set()
        await self._wake.wait()

    async def until_naps(self, count: int) -> None:
        while len(self.naps) < count:
            self.nap_started.clear()
            await self.nap_started.wait()

    def wake(self) -> None:
        self.napping.clear()
        self._wake.set()


async def test_runs_due_at_one_instant_are_released_together() -> None:
    """A thousand waiters for one instant share the alarm's naps and all return at that instant."""
    time = SteppingTime()
    alarm = Alarm(time.clock, time.sleep)
    released: list[int] = []

    async def hold() -> None:
        await alarm.until(NOW + 2_500)
        released.append(time.now)

    await asyncio.wait_for(asyncio.gather(*(hold() for _ in range(1_000))), 5)
    assert time.naps == [1_000, 1_000, 500]  # slices of at most a second, then the remainder
    assert released == [NOW + 2_500] * 1_000
    assert alarm.pending() == 0


async def test_an_instant_already_reached_returns_at_once() -> None:
    """Waiting for the past does not sleep."""
    time = SteppingTime()
    alarm = Alarm(time.clock, time.sleep)
    await asyncio.wait_for(alarm.until(NOW), 5)
    assert time.naps == []


async def test_an_earlier_instant_cuts_a_longer_nap_short() -> None:
    """A run due sooner than the one the alarm naps towards is released on time, not at the end of the nap."""
    time = HeldTime()
    alarm = Alarm(time.clock, time.sleep)
    late = asyncio.create_task(alarm.until(NOW + 10_000))
    await asyncio.wait_for(time.napping.wait(), 5)
    assert time.naps == [1_000]
    soon = asyncio.create_task(alarm.until(NOW + 300))
    await asyncio.wait_for(time.until_naps(2), 5)
    assert time.naps == [1_000, 300]
    time.now += 300
    time.wake()
    await asyncio.wait_for(soon, 5)
    assert not late.done()
    late.cancel()


async def test_a_cancelled_waiter_does_not_hold_back_the_others() -> None:
    """A held run dropped meanwhile (its task cancelled) leaves the rest of its instant to be released."""
    time = SteppingTime()
    alarm = Alarm(time.clock, time.sleep)
    dropped = asyncio.create_task(alarm.until(NOW + 1_500))
    kept = asyncio.create_task(alarm.until(NOW + 1_500))
    await asyncio.sleep(0)
    dropped.cancel()
    await asyncio.wait_for(kept, 5)
    with pytest.raises(asyncio.CancelledError):
        await dropped


async def test_a_clock_jump_is_noticed_within_one_slice() -> None:
    """If the wall clock jumps past the instant, the waiter is released at the end of the current nap."""
    time = HeldTime()
    alarm = Alarm(time.clock, time.sleep)
    waiter = asyncio.create_task(alarm.until(NOW + 60_000))
    await asyncio.wait_for(time.napping.wait(), 5)
    time.now += 60_000  # e.g. NTP stepped the clock
    time.wake()
    await asyncio.wait_for(waiter, 5)
    assert time.naps == [1_000]
