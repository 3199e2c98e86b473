"""The aiohttp application: ``build_app(settings, config, deps=None)``.

Without ``deps`` the app builds its Kafka clients and read model in ``cleanup_ctx`` (they
start with the app's event loop and stop with it). Tests pass :class:`Deps` with fakes and an
in-memory read model, so pure HTTP behaviour is tested without a broker.

Every request passes one middleware that assigns a request id, turns every error (a
:class:`ProblemError`, an aiohttp HTTP exception such as 404/405/413, or anything unexpected)
into a problem document, and records latency per route. An unexpected exception is logged
and answered 500; the test suite fuzzes inputs to show none reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from tickwheel.gateway import handlers
from tickwheel.gateway.auth import TokenTable, bearer_token
from tickwheel.gateway.config import GatewayConfig
from tickwheel.gateway.context import Call, Gateway, Reply, Route
from tickwheel.gateway.limits import IdempotencyKeys, RateLimiter
from tickwheel.gateway.metrics import GatewayMetrics
from tickwheel.gateway.openapi import document
from tickwheel.gateway.ports import Clock, CommandSink, KafkaLag, KafkaSink, LagSource, SystemClock
from tickwheel.gateway.problems import FieldError, ProblemError, render, validation
from tickwheel.gateway.reads import ReadService, StartFence
from tickwheel.gateway.routes import ROUTES
from tickwheel.gateway.waiting import CommandWaiter
from tickwheel.projections.kv import RocksKV
from tickwheel.projections.readmodel import CursorError, Projector, ReadModel
from tickwheel.settings import Settings

log = logging.getLogger(__name__)

GATEWAY_KEY = web.AppKey("gateway", Gateway)
REQUEST_ID_KEY = web.RequestKey("request_id", str)
STATIC_DIR = Path(__file__).parent / "static"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_JSON_TYPES = ("application/json", "application/merge-patch+json")


@dataclass
class Deps:
    """Everything the gateway talks to; given by tests, built from Kafka otherwise."""

    read_model: ReadModel
    sink: CommandSink
    lag: LagSource
    clock: Clock


def build_app(
    settings: Settings,
    config: GatewayConfig | None = None,
    *,
    deps: Deps | None = None,
    tokens: TokenTable | None = None,
    static_dir: Path = STATIC_DIR,
) -> web.Application:
    """The gateway app. ``tokens`` defaults to those configured in the environment."""
    config = config or GatewayConfig()
    tokens = tokens if tokens is not None else load_tokens(settings, config)
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[_errors])
    app[handlers.OPENAPI_KEY] = json.dumps(document(ROUTES)).encode()
    for route in ROUTES:
        app.router.add_route(route.method, route.path, _endpoint(route), name=route.operation_id)
    app.cleanup_ctx.append(_lifecycle(settings, config, deps, tokens, static_dir))
    return app


def load_tokens(settings: Settings, config: GatewayConfig) -> TokenTable:
    """The tokens configured in the environment: file, JSON variable, bootstrap admin token."""
    return TokenTable.load(
        file=settings.tokens_file,
        env_json=config.tokens.get_secret_value() if config.tokens else None,
        admin_token=settings.token.get_secret_value() if settings.token else None,
    )


# ---------------------------------------------------------------------------
# Lifecycle: Kafka clients, read model, answer poller


def _lifecycle(
    settings: Settings, config: GatewayConfig, deps: Deps | None, tokens: TokenTable, static_dir: Path
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            given = (
                deps if deps is not None else await stack.enter_async_context(_kafka_deps(settings, config))
            )
            reads = ReadService(given.read_model)
            stack.callback(reads.close)
            waiter = CommandWaiter(reads.answers, interval_s=config.answer_poll_ms / 1000)
            app[GATEWAY_KEY] = Gateway(
                settings=settings,
                config=config,
                tokens=tokens,
                reads=reads,
                sink=given.sink,
                lag=given.lag,
                waiter=waiter,
                clock=given.clock,
                limiter=RateLimiter(config.creates_per_second, config.create_burst),
                keys=IdempotencyKeys(config.idempotency_cache),
                fence=StartFence(reads, given.lag.ends),
                metrics=GatewayMetrics.create(),
                static_dir=static_dir,
            )
            await stack.enter_async_context(_background(waiter.run()))
            if config.read_model == "secondary" and deps is None:
                await stack.enter_async_context(_background(_refresh(reads, config.refresh_ms / 1000)))
            yield

    return ctx


@contextlib.asynccontextmanager
async def _background(coro: Awaitable[None]) -> AsyncIterator[None]:
    task = asyncio.ensure_future(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _refresh(reads: ReadService, interval_s: float) -> None:
    while True:
        try:
            await reads.refresh()
        except Exception:  # a failed catch-up is retried; reads stay as of the last one
            log.exception("read model refresh failed")
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def _kafka_deps(settings: Settings, config: GatewayConfig) -> AsyncIterator[Deps]:
    async with contextlib.AsyncExitStack() as stack:
        if config.read_model == "secondary":
            await _wait_for_primary(settings)
        kv = _open_read_model(settings, config, stack)
        sink = KafkaSink(settings)
        await sink.start()
        stack.push_async_callback(sink.stop)
        lag = KafkaLag(settings)
        await lag.start()
        stack.push_async_callback(lag.stop)
        if config.read_model == "embedded":
            await stack.enter_async_context(_embedded_projector(settings, kv))
        yield Deps(ReadModel(kv), sink, lag, SystemClock())


async def _wait_for_primary(settings: Settings, timeout_s: float = 60.0) -> None:
    """A secondary reader needs the store `tickwheel projections` creates; started together
    (as `tickwheel up` does), the gateway may come first: wait for it, bounded."""
    from tickwheel.projections.runtime import projections_path

    current = projections_path(settings) / "CURRENT"
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not current.exists() and asyncio.get_running_loop().time() < deadline:
        log.info("waiting for the projections store at %s", current.parent)
        await asyncio.sleep(0.5)


def _open_read_model(settings: Settings, config: GatewayConfig, stack: contextlib.AsyncExitStack) -> RocksKV:
    from tickwheel.projections.runtime import projections_path

    path = projections_path(settings)
    try:
        if config.read_model == "embedded":
            kv = RocksKV(path)
        else:
            # A private catch-up directory per process; RocksDB keeps its own files there.
            secondary = settings.home / f"gateway-secondary-{uuid.uuid4().hex[:8]}"
            stack.callback(shutil.rmtree, secondary, ignore_errors=True)
            kv = RocksKV(path, secondary_path=secondary)
    except Exception as exc:
        hint = (
            "is `tickwheel projections` running? then start the gateway with --read-model secondary"
            if config.read_model == "embedded"
            else "start `tickwheel projections` first, or use --read-model embedded"
        )
        raise RuntimeError(f"cannot open the read model at {path}: {exc} ({hint})") from exc
    stack.callback(kv.close)
    return kv


@contextlib.asynccontextmanager
async def _embedded_projector(settings: Settings, kv: RocksKV) -> AsyncIterator[None]:
    """Fold the log into the gateway's own store, on its own thread, until the app stops."""
    from concurrent.futures import ThreadPoolExecutor

    from tickwheel.projections.metrics import ProjectionMetrics
    from tickwheel.projections.runtime import Runner

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="projections-db")
    stop = asyncio.Event()
    runner = Runner(settings, Projector(kv), ProjectionMetrics.create(), executor)
    task = asyncio.ensure_future(runner.run_forever(stop))
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 30)
        finally:
            executor.shutdown(wait=True)


# ---------------------------------------------------------------------------
# Requests


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    header = request.headers.get("X-Request-Id", "")
    request_id = header if _REQUEST_ID.fullmatch(header) else uuid.uuid4().hex
    request[REQUEST_ID_KEY] = request_id
    started = time.perf_counter()
    try:
        response = await handler(request)
    except ProblemError as problem:
        response = render(problem, request.path_qs[:512], request_id)
    except web.HTTPException as exc:
        response = render(_from_http(exc), request.path_qs[:512], request_id)
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        response = render(
            ProblemError(500, "internal", "unexpected error; see the gateway log"),
            request.path_qs[:512],
            request_id,
        )
    response.headers["X-Request-Id"] = request_id
    _observe(request, response.status, time.perf_counter() - started)
    return response


def _from_http(exc: web.HTTPException) -> ProblemError:
    headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After")}
    kinds = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}
    return ProblemError(exc.status, kinds.get(exc.status, "http"), exc.reason, headers=headers)


def _observe(request: web.Request, status: int, seconds: float) -> None:
    gateway = request.app.get(GATEWAY_KEY)
    if gateway is None:
        return
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    gateway.metrics.request_seconds.labels(method=request.method, route=route, status=str(status)).observe(
        seconds
    )


def _endpoint(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def endpoint(request: web.Request) -> web.StreamResponse:
        gateway = request.app[GATEWAY_KEY]
        principal = _authenticate(gateway, request) if route.auth else None
        query = _query(route.query, request)
        body = await _body(route.body, request, gateway.config.max_body_bytes)
        call = Call(gateway, request, request[REQUEST_ID_KEY], principal, query, body)
        try:
            result = await route.handler(call)
        except CursorError as exc:
            raise validation("cursor", str(exc), 400) from None
        return result if isinstance(result, web.StreamResponse) else _render(result)

    return endpoint


def _authenticate(gateway: Gateway, request: web.Request) -> Any:
    token = bearer_token(request.headers.get("Authorization"))
    principal = gateway.tokens.authenticate(token) if token is not None else None
    if principal is None:
        raise ProblemError(
            401,
            "unauthorized",
            "send Authorization: Bearer <token>",
            headers={"WWW-Authenticate": 'Bearer realm="tickwheel"'},
        )
    return principal


def _field(loc: tuple[int | str, ...], whole: str) -> str:
    parts = [
        str(p)
        for i, p in enumerate(loc)
        if not (i > 0 and loc[i - 1] == "schedule" and p in ("cron", "once"))
    ]
    return ".".join(parts) or whole


def _errors_of(exc: ValidationError, whole: str) -> list[FieldError]:
    """Field errors in the API's spelling; ``whole`` names the input when no field is at fault."""
    return [FieldError(_field(e["loc"], whole), e["msg"]) for e in exc.errors(include_url=False)[:20]]


def _query(model: type[BaseModel] | None, request: web.Request) -> Any:
    if model is None:
        return None
    params: dict[str, str] = {}
    for name, value in request.query.items():
        if name in params:
            raise validation(name, "must be given once", 400)
        params[name] = value
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        errors = _errors_of(exc, "query")
        raise ProblemError(
            400, "validation", errors[0].message, field=errors[0].field, errors=errors
        ) from None


async def _body(model: type[BaseModel] | None, request: web.Request, limit: int) -> Any:
    if model is None:
        return None
    length = request.content_length
    if length is not None and length > limit:
        raise ProblemError(413, "payload-too-large", f"request body over {limit} bytes")
    if request.content_type not in _JSON_TYPES:
        raise ProblemError(
            415, "unsupported-media-type", "send Content-Type: application/json", field="Content-Type"
        )
    raw = await request.read()  # aiohttp enforces client_max_size on chunked bodies too (413)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = _errors_of(exc, "body")
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ProblemError(400, "malformed-json", errors[0].message, field="body") from None
        raise ProblemError(
            422, "validation", errors[0].message, field=errors[0].field, errors=errors
        ) from None


def _render(reply: Reply) -> web.Response:
    if reply.model is not None:
        body = reply.model.model_dump_json().encode()
        return web.Response(
            status=reply.status, body=body, content_type="application/json", headers=dict(reply.headers)
        )
    response = web.Response(status=reply.status, body=reply.raw or b"", headers=dict(reply.headers))
    response.headers["Content-Type"] = reply.media
    return response
