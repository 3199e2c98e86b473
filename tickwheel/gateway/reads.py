"""The gateway's async face of the read model: every query on one dedicated thread.

RocksDB calls hold the GIL and block; a page of a listing is a bounded scan, but still not
something to run on the event loop. One thread per store keeps the calls ordered and off it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
