"""``?wait=committed``: wait until the processor has answered a command, with a timeout.

The answer source is the read model: a command's answer is folded in the same atomic write
as the job change it describes, so once the answer is visible so is the job (read your
writes). One poll loop serves every waiter: each round it refreshes the read model once and
looks all pending command ids up with one multi-get, instead of one poll per request.

A waiter registers *before* the first lookup, so an answer that lands between the lookup and
the registration is still seen on the next round. Tests drive :meth:`poll_once` by hand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tickwheel.projections.views import CommandAnswer

log = logging.getLogger(__name__)

Lookup = Callable[[list[str]], Awaitable[dict[str, CommandAnswer]]]


class CommandWaiter:
    """Resolves waits for command answers from a batched lookup."""

    def __init__(self, lookup: Lookup, *, interval_s: float) -> None:
        self._lookup = lookup
        self._interval_s = interval_s
        self._waiting: dict[str, list[asyncio.Future[CommandAnswer]]] = {}
        self._wake = asyncio.Event()

    @property
    def pending(self) -> int:
        return len(self._waiting)

    async def wait(self, command_id: str, timeout_s: float) -> CommandAnswer | None:
        """The command's answer, or None if none arrived within ``timeout_s``."""
        future: asyncio.Future[CommandAnswer] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(command_id, []).append(future)
        self._wake.set()
        try:
            found = (await self._lookup([command_id])).get(command_id)
            if found is not None:
                return found
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._forget(command_id, future)

    def _forget(self, command_id: str, future: asyncio.Future[CommandAnswer]) -> None:
        futures = self._waiting.get(command_id, [])
        if future in futures:
            futures.remove(future)
        if not futures:
            self._waiting.pop(command_id, None)

    async def poll_once(self) -> int:
        """Look every pending command up once; returns how many waits were resolved."""
        ids = list(self._waiting)
        if not ids:
            return 0
        answers = await self._lookup(ids)
        resolved = 0
        for command_id, answer in answers.items():
            for future in self._waiting.get(command_id, []):
                if not future.done():
                    future.set_result(answer)
                    resolved += 1
        return resolved

    async def run(self) -> None:
        """Poll while anyone waits; sleep on an event otherwise. Runs until cancelled."""
        while True:
            if not self._waiting:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self.poll_once()
            except Exception:  # the next round retries; a waiter times out at worst
                log.exception("command answer lookup failed")
            await asyncio.sleep(self._interval_s)
