"""Per-team concurrency limits that hold across all the workers of a pool.

There is no coordinator to count a team's runs across workers, but the consumer group
already splits the ``runs`` partitions into disjoint sets. So each worker takes a share of
each team's limit proportional to the partitions it is assigned:

    share = floor(limit * assigned / total), and at least 1 when it has any partition.

For disjoint assignments the floors sum to at most ``limit``. The "at least 1" can add to
that: a member whose floor is 0 (few partitions, small limit) still runs one at a time, so
the pool-wide bound is ``limit + (members whose floor was 0)``; with ``limit >= members``
and an even assignment it is at most ``limit``. The alternative, a zero share, would starve
the team's runs on those partitions forever.

Shares change on rebalance. Running executions are never preempted: a worker whose share
shrank simply admits nothing new for that team until it is under its new share, so the
bound can be exceeded for as long as the longest run that was admitted under the old share.
Runs over the limit wait (their offsets are not committed, so a crash redelivers them).
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext


def team_share(limit: int, assigned: int, total: int) -> int:
    """This worker's part of a team's ``limit`` when it holds ``assigned`` of ``total`` partitions."""
    if assigned <= 0 or total <= 0:
        return 0
    return max(1, limit * min(assigned, total) // total)


_FREE: AbstractAsyncContextManager[None] = nullcontext()


class TeamGate:
    """Admits at most a team's share of its runs at once; teams without a limit pass freely."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.limits = dict(limits)
        self.assigned = 0
        self.total = 0
        self.in_use: Counter[str] = Counter()
        self._waiters: dict[str, list[asyncio.Future[None]]] = defaultdict(list)

    def capacity(self, team: str) -> int | None:
        limit = self.limits.get(team)
        return None if limit is None else team_share(limit, self.assigned, self.total)

    def set_assignment(self, assigned: int, total: int) -> None:
        """Recompute every share after a rebalance and wake the runs waiting for one."""
        self.assigned, self.total = assigned, total
        for team in list(self._waiters):
            self._wake(team)

    def slot(self, team: str) -> AbstractAsyncContextManager[None]:
        """Hold one of ``team``'s slots for the duration of the block (a team without a limit: free)."""
        return self._slot(team) if team in self.limits else _FREE

    @asynccontextmanager
    async def _slot(self, team: str) -> AsyncIterator[None]:
        await self._acquire(team)
        try:
            yield
        finally:
            self.in_use[team] -= 1
            self._wake(team)

    async def _acquire(self, team: str) -> None:
        # Check and take happen without an await in between, so no other task interleaves.
        while not self._has_room(team):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[team].append(waiter)
            try:
                await waiter
            finally:
                self._waiters[team].remove(waiter)
        self.in_use[team] += 1

    def _has_room(self, team: str) -> bool:
        capacity = self.capacity(team)
        return capacity is None or self.in_use[team] < capacity

    def _wake(self, team: str) -> None:
        for waiter in self._waiters.get(team, ()):
            if not waiter.done():
                waiter.set_result(None)


class Slots:
    """A worker's execution slots: a counting semaphore whose release is O(1).

    ``asyncio.Semaphore`` (3.11) scans its waiters on every release, past those already
    woken but not yet run. At a hot instant thousands of runs wait for a slot and a batch of
    acks frees hundreds at once, so that scan grew with the square of the batch. Here a
    release hands its slot straight to the longest waiter still waiting.
    """

    def __init__(self, value: int) -> None:
        self._free = value
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self._free > 0:  # implies no one is waiting: a release serves waiters first
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the slot is handed over: _free was not given it
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over just as the waiter gave up: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # one that gave up (cancelled) is skipped
                waiter.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
