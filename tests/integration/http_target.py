"""A real local HTTP target that records every call, for tests of "exactly once in effect".

``HttpTarget`` listens on 127.0.0.1 (a free port) and keeps a ledger:

* every request is a :class:`Call` in ``calls`` (method, path, headers, body, and the
  Tickwheel headers: ``Idempotency-Key``, ``X-Tickwheel-Attempt``, ``X-Tickwheel-Run-Id``);
  a call whose client went away before the response is marked ``aborted``;
* the *effect* of a call is applied at most once per idempotency key (``effects[key]``
  counts applications and never exceeds 1), while ``raw_calls`` counts every arrival;
* the attempt header is a fencing token: a call carrying an older attempt than one already
  seen for its key is refused with 409 and applies nothing.

The effect is applied when the request *arrives*, before any configured delay: like a real
service that did the work but whose response was lost (worker killed mid-call), which is
the case idempotency keys exist for.

Routes: ``/effect`` (apply, answer 200), ``/slow?ms=N[&until_attempt=K]`` (apply, then answer
after N ms; with K, only attempts <= K are slow),
``/status/{code}``, ``/redirect?to=URL&code=302``, ``/big?bytes=N``, ``/echo`` (answers
the request headers and body as JSON).

Usage::

    async with HttpTarget() as target:
        url = target.url("/slow?ms=5000")
        ...
        assert target.effects[run_id] == 1
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    idempotency_key: str | None
    attempt: int | None
    run_id: str | None
    at: float = field(default_factory=time.monotonic)
    applied: bool = False  # this call applied the effect (the first for its key)
    status: int | None = None  # what was answered; None while pending or when aborted
    aborted: bool = False  # the client disconnected before the answer


class HttpTarget:
    """A recording HTTP server on 127.0.0.1; see the module docstring."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.effects: Counter[str] = Counter()
        self.fence: dict[str, int] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/effect", self._effect)
        app.router.add_route("*", "/slow", self._slow)
        app.router.add_route("*", "/status/{code}", self._status)
        app.router.add_route("*", "/redirect", self._redirect)
        app.router.add_route("*", "/big", self._big)
        app.router.add_route("*", "/echo", self._echo)
        # handler_cancellation: a handler learns (CancelledError) when its client went away.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))  # our own socket, so the port chosen for 0 is known
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> HttpTarget:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    # -- queries ------------------------------------------------------------------------

    def raw_calls(self, key: str | None = None) -> int:
        """Arrivals, all or for one idempotency key."""
        return sum(1 for c in self.calls if key is None or c.idempotency_key == key)

    def calls_for(self, key: str) -> list[Call]:
        return [c for c in self.calls if c.idempotency_key == key]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate()`` holds; re-checked whenever a call arrives, is answered or aborts.

        Bound it with ``asyncio.timeout``.
        """
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for_calls(self, count: int) -> list[Call]:
        """Until at least ``count`` calls arrived."""
        await self.wait_until(lambda: len(self.calls) >= count)
        return self.calls

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- handlers -------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> Call:
        headers = dict(request.headers)
        attempt = headers.get("X-Tickwheel-Attempt")
        call = Call(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=headers,
            body=await request.read(),
            idempotency_key=headers.get("Idempotency-Key"),
            attempt=int(attempt) if attempt and attempt.isdigit() else None,
            run_id=headers.get("X-Tickwheel-Run-Id"),
        )
        self.calls.append(call)
        await self._notify()
        return call

    def _apply(self, call: Call) -> int:
        """Apply the effect once per key; 409 for an attempt older than one already seen."""
        key = call.idempotency_key
        if key is None:
            return 200
        if call.attempt is not None:
            if call.attempt < self.fence.get(key, 0):
                return 409
            self.fence[key] = call.attempt
        if self.effects[key] == 0:
            self.effects[key] += 1
            call.applied = True
        return 200

    async def _answer(self, call: Call, status: int, delay_s: float = 0.0, body: Any = None) -> web.Response:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
        except asyncio.CancelledError:
            call.aborted = True
            asyncio.get_running_loop().create_task(self._notify())  # this task is being cancelled
            raise
        call.status = status
        await self._notify()
        payload = body if body is not None else {"applied": call.applied, "key": call.idempotency_key}
        return web.json_response(payload, status=status)

    async def _effect(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        return await self._answer(call, self._apply(call))

    async def _slow(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        status = self._apply(call)
        # until_attempt=K: only attempts <= K are slow (a re-dispatched attempt answers at once).
        until = int(request.query.get("until_attempt", "0"))
        fast = until and call.attempt is not None and call.attempt > until
        return await self._answer(
            call, status, delay_s=0 if fast else int(request.query.get("ms", "1000")) / 1000
        )

    async def _status(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        return await self._answer(call, int(request.match_info["code"]))

    async def _redirect(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        call.status = int(request.query.get("code", "302"))
        return web.Response(status=call.status, headers={"Location": request.query["to"]})

    async def _big(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        call.status = 200
        return web.Response(body=b"x" * int(request.query.get("bytes", "100000")))

    async def _echo(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        return await self._answer(call, 200, body={"headers": call.headers, "body": call.body.decode()})
