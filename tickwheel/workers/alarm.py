"""One timer for every held run: look-ahead RunDue wait here until their ``not_before``.

At a hot instant thousands of runs hold until the same instant. A timer each would fill the
event loop's timer heap, so that every other timer (each send's timeout, each lease) pays
log n for it, and, sleeping in slices to notice a clock that jumps, would wake every held run
once a second for the whole look-ahead. :class:`Alarm` keeps the waiters grouped by instant
and has one task sleep towards the earliest: a hot instant is one wake-up that releases
all its runs together.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable

SLICE_MS = 1_000  # the longest nap: an injected clock that jumps is noticed within this


class Alarm:
    """Wakes each waiter of :meth:`until` once the clock reaches its instant."""

    def __init__(
        self,
        clock: Callable[[], int],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        *,
        slice_ms: int = SLICE_MS,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._slice_ms = slice_ms
        self._waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._instants: list[int] = []  # a heap of the keys of _waiters
        self._ticker: asyncio.Task[None] | None = None
        self._nap: asyncio.Task[None] | None = None
        self._nap_until = 0
        self.naps = 0  # how many times the ticker slept (for tests)

    def pending(self) -> int:
        """Waiters not yet released (cancelled ones included until their instant)."""
        return sum(len(waiters) for waiters in self._waiters.values())

    async def until(self, instant_ms: int) -> None:
        """Return once ``clock() >= instant_ms``."""
        if self._clock() >= instant_ms:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if instant_ms not in self._waiters:
            self._waiters[instant_ms] = []
            heapq.heappush(self._instants, instant_ms)
        self._waiters[instant_ms].append(waiter)
        self._wake_for(instant_ms)
        await waiter  # a cancelled caller cancels only its own future; release skips it

    def _wake_for(self, instant_ms: int) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="alarm")
        elif self._nap is not None and instant_ms < self._nap_until:
            self._nap.cancel()  # napping towards a later instant: look again now

    async def _tick(self) -> None:
        try:
            while self._instants:
                now = self._clock()
                self._release(now)
                if self._instants:
                    await self._nap_for(min(self._instants[0] - now, self._slice_ms), now)
        finally:
            if self._nap is not None:
                self._nap.cancel()

    async def _nap_for(self, wait_ms: int, now: int) -> None:
        self.naps += 1
        self._nap_until = now + wait_ms
        self._nap = asyncio.create_task(self._sleep_ms(wait_ms))
        try:
            await asyncio.wait({self._nap})  # returns (does not raise) when the nap is cancelled
        finally:
            self._nap = None

    async def _sleep_ms(self, wait_ms: int) -> None:
        await self._sleep(wait_ms / 1000)

    def _release(self, now: int) -> None:
        while self._instants and self._instants[0] <= now:
            for waiter in self._waiters.pop(heapq.heappop(self._instants)):
                if not waiter.done():
                    waiter.set_result(None)
