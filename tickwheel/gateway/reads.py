"""The gateway's async face of the read model: every query on one dedicated thread.

RocksDB calls hold the GIL and block; a page of a listing is a bounded scan, but still not
something to run on the event loop. One thread per store keeps the calls ordered and off it.

:class:`StartFence` holds a new gateway's mutations until its read model knows the keys and
answers the log already held (see its docstring).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tickwheel.projections.readmodel import ReadModel
from tickwheel.projections.views import CommandAnswer

T = TypeVar("T")


class ReadService:
    """Runs read-model queries on its own thread; ``refresh`` catches a secondary reader up."""

    def __init__(self, model: ReadModel) -> None:
        self.model = model
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-reads")

    async def call(self, fn: Callable[[ReadModel], T]) -> T:
        """``fn(model)`` on the read thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, self.model)

    async def refresh(self) -> None:
        await self.call(lambda m: m.refresh())

    async def answers(self, command_ids: list[str]) -> dict[str, CommandAnswer]:
        """Refresh, then look the answers up: the waiter's lookup."""

        def lookup(model: ReadModel) -> dict[str, CommandAnswer]:
            model.refresh()
            return model.answers(command_ids)

        return await self.call(lookup)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


# The topics the idempotency checks read: key claims (audit) and command answers (job-events).
FENCED_TOPICS = frozenset({"audit", "job-events"})

Offsets = Mapping[tuple[str, int], int]


class StartFence:
    """Mutations wait until the read model has folded the claims and answers on the log.

    A gateway that just started (a restart, another instance, a fresh store) has an empty
    in-process key cache and a read model that may still be catching up: without this, a
    key used before the start would look new. The first mutation asks the log for the end
    offsets of :data:`FENCED_TOPICS`; mutations proceed once the read model's positions have
    reached them. Once reached, the fence stays open for good: what was appended since is
    either this process's own (in its key cache) or another gateway's, within the fold lag.
    """

    def __init__(self, reads: ReadService, ends: Callable[[], Awaitable[Offsets | None]]) -> None:
        self._reads = reads
        self._ends = ends
        self._target: dict[tuple[str, int], int] | None = None
        self._lock = asyncio.Lock()
        self.open = False

    async def check(self) -> bool:
        """Whether the read model has reached the target (taken from the log on first use)."""
        if self.open:
            return True
        target = await self._target_offsets()
        if target is None:
            return False  # the log cannot be asked; an append would fail as well
        positions = await self._reads.call(lambda m: m.positions())
        self.open = all(positions.get(where, 0) >= end for where, end in target.items())
        return self.open

    async def wait(self, timeout_s: float, poll_s: float) -> bool:
        """:meth:`check` until it holds or ``timeout_s`` passed; whether it holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await self.check():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    async def _target_offsets(self) -> dict[tuple[str, int], int] | None:
        async with self._lock:  # concurrent first mutations ask the log once
            if self._target is None:
                ends = await self._ends()
                if ends is not None:
                    self._target = {k: v for k, v in ends.items() if k[0] in FENCED_TOPICS}
            return self._target
