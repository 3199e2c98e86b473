"""A tiny local HTTP target for examples and demos: records calls, applies each effect once.

``tickwheel echo-target --port 8099`` answers ``POST /effect`` with 200 and counts calls per
``Idempotency-Key``; ``GET /ledger`` shows the counts. It is the idempotent target the example
jobs of ``tickwheel up`` call.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from aiohttp import web


def build_app() -> web.Application:
    calls: Counter[str] = Counter()
    app = web.Application()

    async def effect(request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key", "")
        calls[key] += 1
        applied = calls[key] == 1
        return web.json_response({"applied": applied, "calls": calls[key]})

    async def ledger(_request: web.Request) -> web.Response:
        return web.json_response(dict(calls))

    app.router.add_post("/effect", effect)
    app.router.add_get("/ledger", ledger)
    return app


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("echo-target", help="run a local idempotent HTTP target (demos)")
    parser.add_argument("--port", type=int, default=8099)
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    asyncio.run(_serve(args.port))
    return 0


async def _serve(port: int) -> None:
    runner = web.AppRunner(build_app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()
