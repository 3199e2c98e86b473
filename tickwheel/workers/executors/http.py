"""The ``http`` executor: one HTTP request per attempt, behind the SSRF guard.

Config (JSON object)::

    {"url": "https://api.example.com/hook",        required, http or https
     "method": "POST",                              default POST
     "headers": {"Authorization": {"secret": "HOOK_TOKEN", "template": "Bearer {}"}},
     "body": {"any": "json"} | "raw text",          a non-string body is sent as JSON
     "timeout_ms": 30000,                           default WorkerConfig.http_timeout_ms
     "max_response_bytes": 1048576,                 the rest of a larger body is not read
     "allow_redirects": false, "max_redirects": 5,
     "previous_result_field": "input"}              workflow: put the previous step's result
                                                    into this field of the JSON body

Every request carries ``Idempotency-Key`` (the run id; ``run_id/step`` inside a workflow),
``X-Tickwheel-Attempt`` (the fencing token), ``X-Tickwheel-Run-Id`` and
``X-Tickwheel-Job-Id``; a config cannot override them.

Each hop (the URL and every followed redirect) is vetted by the :class:`SsrfGuard` and the
vetted addresses are pinned in this request's resolver, so the connection goes to exactly
the address that was checked while ``Host`` and TLS SNI keep the name. Redirects are
followed by hand (never by aiohttp) so that each hop is vetted, and credentials
(``Authorization``, ``Cookie``) are dropped when a redirect leaves the origin. Proxies from
the environment are ignored (``trust_env=False``): a proxy would connect on our behalf to an
address nobody checked.

Outcome: 2xx succeeds with the (capped) body as result; 5xx, 429, timeouts and connection
errors fail retryably; other statuses (including a redirect that is not allowed) fail
for good; a refused destination fails for good with the guard's reason.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tickwheel.workers.executors.base import (
    ExecResult,
    ExecutorConfigError,
    ExecutorEnv,
    RunContext,
    get_bool,
    get_int,
    get_str,
    get_str_map,
)
from tickwheel.workers.ssrf import DestinationRefused, IPAddress, SsrfGuard

REDIRECTS = frozenset({301, 302, 303, 307, 308})
RESERVED_HEADERS = ("Idempotency-Key", "X-Tickwheel-Attempt", "X-Tickwheel-Run-Id", "X-Tickwheel-Job-Id")
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_READ_BLOCK = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpConfig:
    url: URL
    method: str
    headers: Mapping[str, str]
    body: Any  # None, a str sent as is, or a JSON value
    timeout_ms: int
    max_response_bytes: int
    allow_redirects: bool
    max_redirects: int
    previous_result_field: str | None


def parse_config(config: Mapping[str, Any], env: ExecutorEnv) -> HttpConfig:
    url = URL(get_str(config, "url"))
    if url.scheme not in ("http", "https") or not url.host:
        raise ExecutorConfigError(
            f"config field 'url' must be an http(s) URL with a host, got {url.scheme!r}"
        )
    field = config.get("previous_result_field")
    if field is not None and not isinstance(field, str):
        raise ExecutorConfigError("config field 'previous_result_field' must be a string")
    body = config.get("body")
    if field is not None and body is not None and not isinstance(body, dict):
        raise ExecutorConfigError("'previous_result_field' needs 'body' to be a JSON object (or absent)")
    return HttpConfig(
        url=url,
        method=get_str(config, "method", "POST").upper(),
        headers=get_str_map(config, "headers"),
        body=body,
        timeout_ms=get_int(config, "timeout_ms", env.config.http_timeout_ms, minimum=1),
        max_response_bytes=get_int(config, "max_response_bytes", env.config.http_max_response_bytes),
        allow_redirects=get_bool(config, "allow_redirects", False),
        max_redirects=get_int(config, "max_redirects", 5),
        previous_result_field=field,
    )


def create(config: Mapping[str, Any], env: ExecutorEnv) -> HttpExecutor:
    return HttpExecutor(parse_config(config, env), env.guard)


class PinnedResolver(AbstractResolver):
    """Answers only for names the guard vetted, with exactly the addresses it vetted."""

    def __init__(self) -> None:
        self._pins: dict[str, list[IPAddress]] = {}

    def pin(self, host: str, addresses: list[IPAddress]) -> None:
        self._pins[host] = addresses

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[ResolveResult]:
        addresses = self._pins.get(host)
        if addresses is None:
            raise DestinationRefused(f"{host} was not vetted by the SSRF guard")
        return [_answer(host, ip, port) for ip in addresses]

    async def close(self) -> None:
        return None


def _answer(host: str, ip: IPAddress, port: int) -> ResolveResult:
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    return {
        "hostname": host,
        "host": str(ip),
        "port": port,
        "family": family,
        "proto": 0,
        "flags": socket.AI_NUMERICHOST,
    }


@dataclass(frozen=True, slots=True)
class _Hop:
    method: str
    url: URL
    headers: Mapping[str, str]
    body: bytes | None


class HttpExecutor:
    def __init__(self, config: HttpConfig, guard: SsrfGuard) -> None:
        self.config = config
        self.guard = guard

    async def run(self, ctx: RunContext) -> ExecResult:
        try:
            async with asyncio.timeout(self.config.timeout_ms / 1000):
                return await self._call(ctx)
        except DestinationRefused as exc:
            return ExecResult.failure("DestinationRefused", str(exc), retryable=False)
        except TimeoutError:
            return ExecResult.failure(
                "Timeout", f"no response within {self.config.timeout_ms} ms", retryable=True
            )
        except aiohttp.ClientError as exc:
            return ExecResult.failure(type(exc).__name__, str(exc) or repr(exc), retryable=True)

    async def _call(self, ctx: RunContext) -> ExecResult:
        resolver = PinnedResolver()
        connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
        async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
            hop = self._first_hop(ctx)
            for _ in range(self.config.max_redirects + 1):
                await self._vet(hop.url, resolver)
                async with session.request(
                    hop.method, hop.url, headers=dict(hop.headers), data=hop.body, allow_redirects=False
                ) as response:
                    body, truncated = await read_capped(response, self.config.max_response_bytes)
                    following = self._redirect(hop, response)
                    if following is None:
                        return self._outcome(ctx, hop, response, body, truncated)
                ctx.output.write(
                    f"{hop.method} {hop.url} -> HTTP {response.status}, following to {following.url}\n"
                )
                hop = following
        return ExecResult.failure(
            "TooManyRedirects", f"more than {self.config.max_redirects} redirects", retryable=False
        )

    def _first_hop(self, ctx: RunContext) -> _Hop:
        headers = {k: v for k, v in self.config.headers.items() if k.lower() not in _RESERVED_LOWER}
        headers.update(
            zip(
                RESERVED_HEADERS, (ctx.idempotency_key, str(ctx.attempt), ctx.run_id, ctx.job_id), strict=True
            )
        )
        body = self.config.body
        if self.config.previous_result_field and ctx.previous_result is not None:
            body = {**(body or {}), self.config.previous_result_field: ctx.previous_result}
        if body is None:
            return _Hop(self.config.method, self.config.url, headers, None)
        if isinstance(body, str):
            return _Hop(self.config.method, self.config.url, headers, body.encode())
        headers.setdefault("Content-Type", "application/json")
        return _Hop(self.config.method, self.config.url, headers, json.dumps(body).encode())

    async def _vet(self, url: URL, resolver: PinnedResolver) -> None:
        if url.scheme not in ("http", "https") or not url.raw_host:
            raise DestinationRefused(f"refusing to follow to {url}: not an http(s) URL")
        port = url.port or (443 if url.scheme == "https" else 80)
        resolver.pin(url.raw_host, await self.guard.vet(url.raw_host, port))

    def _redirect(self, hop: _Hop, response: aiohttp.ClientResponse) -> _Hop | None:
        location = response.headers.get("Location")
        if not self.config.allow_redirects or response.status not in REDIRECTS or not location:
            return None
        url = hop.url.join(URL(location))
        headers = dict(hop.headers)
        if url.origin() != hop.url.origin():
            headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}
        if response.status == 303 or (response.status in (301, 302) and hop.method == "POST"):
            return _Hop("GET", url, headers, None)
        return _Hop(hop.method, url, headers, hop.body)

    def _outcome(
        self, ctx: RunContext, hop: _Hop, response: aiohttp.ClientResponse, body: bytes, truncated: bool
    ) -> ExecResult:
        text = body.decode(errors="replace")
        status = response.status
        ctx.output.write(f"{hop.method} {hop.url} -> HTTP {status} {response.reason or ''}\n{text}")
        if truncated:
            ctx.output.write(f"\n[response truncated at {self.config.max_response_bytes} bytes]\n")
        if 200 <= status < 300:
            return ExecResult.success(text)
        message = f"HTTP {status} {response.reason or ''}".strip()
        if status in REDIRECTS:
            return ExecResult.failure(
                "RedirectNotAllowed", f"{message} to {response.headers.get('Location')}", retryable=False
            )
        return ExecResult.failure("HttpStatus", message, retryable=status == 429 or status >= 500)


_RESERVED_LOWER = frozenset(h.lower() for h in RESERVED_HEADERS)


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body, and whether there was more (which is not read)."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        block = await response.content.read(min(_READ_BLOCK, limit + 1 - size))
        if not block:
            return b"".join(parts), False
        parts.append(block)
        size += len(block)
    return b"".join(parts)[:limit], True
