"""What a handler receives and returns, and the table entry that declares a route.

A :class:`Route` says everything the HTTP layer and the OpenAPI document need: method, path,
models of the query, body and responses, headers, which problems it may answer. The app is
built from the route table and ``/openapi.json`` is generated from the same table, so the
two cannot drift apart silently (a test compares them anyway).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from tickwheel.gateway.auth import Principal, TokenTable
from tickwheel.gateway.config import GatewayConfig
from tickwheel.gateway.limits import IdempotencyKeys, RateLimiter
from tickwheel.gateway.metrics import GatewayMetrics
from tickwheel.gateway.ports import Clock, CommandSink, LagSource
from tickwheel.gateway.reads import ReadService, StartFence
from tickwheel.gateway.waiting import CommandWaiter
from tickwheel.settings import Settings


@dataclass
class Gateway:
    """The gateway's dependencies, one per app."""

    settings: Settings
    config: GatewayConfig
    tokens: TokenTable
    reads: ReadService
    sink: CommandSink
    lag: LagSource
    waiter: CommandWaiter
    clock: Clock
    limiter: RateLimiter
    keys: IdempotencyKeys
    fence: StartFence
    metrics: GatewayMetrics
    static_dir: Path


@dataclass(frozen=True)
class Call:
    """One validated request."""

    gateway: Gateway
    request: web.Request
    request_id: str
    principal: Principal | None
    query: Any
    body: Any

    def path(self, name: str) -> str:
        return self.request.match_info[name]

    def who(self) -> Principal:
        assert self.principal is not None  # only authenticated routes ask
        return self.principal


@dataclass(frozen=True)
class Reply:
    """A successful answer: a model rendered as JSON, or raw bytes of ``media`` type."""

    status: int = 200
    model: BaseModel | None = None
    raw: bytes | None = None
    media: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Call], Awaitable[Reply | web.StreamResponse]]


@dataclass(frozen=True)
class Header:
    name: str
    description: str
    required: bool = False
    pattern: str | None = None


@dataclass(frozen=True)
class Route:
    """One endpoint: how it is served and how it is documented."""

    method: str
    path: str
    operation_id: str
    summary: str
    handler: Handler
    tag: str
    ok: int = 200
    response: type[BaseModel] | None = None
    media: str = "application/json"
    more_media: tuple[str, ...] = ()  # further media types of a model-less success answer
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    auth: bool = True
    headers: tuple[Header, ...] = ()
    others: tuple[tuple[int, type[BaseModel], str], ...] = ()  # further success answers
    problems: tuple[int, ...] = ()
