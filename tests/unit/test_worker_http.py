"""The http executor against a real local server: headers, statuses, caps, redirects, SSRF, abort."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.integration.http_target import HttpTarget
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import (
    ExecResult,
    ExecutorConfigError,
    ExecutorEnv,
    RunContext,
    builtin_registry,
)
from tickwheel.workers.ssrf import SsrfGuard


class Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


async def _resolve(host: str, port: int) -> Sequence[str]:
    answers = {"target.test": ["127.0.0.1"], "meta.test": ["169.254.169.254"]}
    if host not in answers:
        raise OSError(f"unknown host {host}")
    return answers[host]


def _env(allow: Sequence[str]) -> ExecutorEnv:
    config = WorkerConfig(worker_id="w", http_max_response_bytes=1_000, ssrf_allow=tuple(allow))
    return ExecutorEnv(config, SsrfGuard(allow, _resolve), builtin_registry())


async def _call(
    config: dict[str, Any], allow: Sequence[str] = ("127.0.0.1", "target.test")
) -> tuple[ExecResult, str]:
    env = _env(allow)
    sink = Sink()
    executor = env.registry.build("http", config, env)
    return await executor.run(RunContext("r-7", "job-7", 2, "team", sink, "r-7")), sink.text


@pytest.fixture
async def target() -> AsyncIterator[HttpTarget]:
    async with HttpTarget() as server:
        yield server


async def test_call_carries_idempotency_key_and_fencing_token(target: HttpTarget) -> None:
    """Idempotency-Key = run id, X-Tickwheel-Attempt = attempt; a config cannot override them."""
    config = {
        "url": target.url("/echo"),
        "headers": {"Idempotency-Key": "forged", "X-Custom": "1"},
        "body": {"hello": "world"},
    }
    result, output = await _call(config)
    assert result.ok, result
    echoed = json.loads(result.result)
    headers = echoed["headers"]
    assert headers["Idempotency-Key"] == "r-7"
    assert headers["X-Tickwheel-Attempt"] == "2"
    assert headers["X-Tickwheel-Run-Id"] == "r-7"
    assert headers["X-Tickwheel-Job-Id"] == "job-7"
    assert headers["X-Custom"] == "1"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(echoed["body"]) == {"hello": "world"}
    assert "-> HTTP 200" in output


async def test_connection_goes_to_the_vetted_address_with_the_name_as_host(target: HttpTarget) -> None:
    """A name the system cannot resolve works: the pinned, vetted address is used; Host keeps the name."""
    result, _ = await _call({"url": f"http://target.test:{target.port}/echo"}, allow=["target.test"])
    assert result.ok, result
    assert json.loads(result.result)["headers"]["Host"] == f"target.test:{target.port}"


async def test_loopback_target_refused_without_allow_list(target: HttpTarget) -> None:
    """Without an allow-list entry the local target is refused, clearly, and never called."""
    result, _ = await _call({"url": target.url("/effect")}, allow=())
    assert result == ExecResult.failure(
        "DestinationRefused", f"destination 127.0.0.1 port {target.port} refused: loopback", retryable=False
    )
    assert target.raw_calls() == 0


@pytest.mark.parametrize(
    "host", ["[::ffff:127.0.0.1]", "[::1]", "169.254.169.254", "meta.test", "[64:ff9b::7f00:1]"]
)
async def test_internal_destinations_refused(host: str) -> None:
    """Literal and resolved internal destinations in every form are refused before connecting."""
    result, _ = await _call({"url": f"http://{host}:9/x"}, allow=())
    assert result.error_class == "DestinationRefused"
    assert not result.retryable


@pytest.mark.parametrize(
    ("code", "retryable"), [(500, True), (503, True), (429, True), (404, False), (400, False)]
)
async def test_status_codes_map_to_retryability(target: HttpTarget, code: int, retryable: bool) -> None:
    """Non-2xx fails: retryable for 5xx and 429, final for other 4xx."""
    result, _ = await _call({"url": target.url(f"/status/{code}")})
    assert not result.ok
    assert result.error_class == "HttpStatus"
    assert result.retryable is retryable


async def test_redirects_refused_unless_allowed_and_each_hop_vetted(target: HttpTarget) -> None:
    """A redirect is a final failure by default; when allowed, a hop to metadata is still refused."""
    back = target.url("/echo")
    result, _ = await _call({"url": target.url(f"/redirect?to={back}")})
    assert result.error_class == "RedirectNotAllowed"
    followed, _ = await _call(
        {
            "url": target.url(f"/redirect?to={back}&code=307"),
            "allow_redirects": True,
            "headers": {"Authorization": "keep"},
        }
    )
    assert followed.ok
    assert json.loads(followed.result)["headers"]["Authorization"] == "keep"
    evil, _ = await _call(
        {"url": target.url("/redirect?to=http://169.254.169.254/latest"), "allow_redirects": True}
    )
    assert evil.error_class == "DestinationRefused"
    assert "cloud metadata" in evil.error_message


async def test_cross_origin_redirect_drops_credentials(target: HttpTarget) -> None:
    """Authorization is not forwarded when a redirect leaves the origin."""
    other = f"http://target.test:{target.port}/echo"
    result, _ = await _call(
        {
            "url": target.url(f"/redirect?to={other}&code=307"),
            "allow_redirects": True,
            "headers": {"Authorization": "Bearer t"},
        }
    )
    assert result.ok
    assert "Authorization" not in json.loads(result.result)["headers"]


async def test_response_size_is_capped(target: HttpTarget) -> None:
    """At most max_response_bytes of the body are read; the log says the response was truncated."""
    result, output = await _call({"url": target.url("/big?bytes=50000")})
    assert result.ok
    assert len(result.result) == 1_000
    assert "[response truncated at 1000 bytes]" in output


async def test_timeout_is_retryable(target: HttpTarget) -> None:
    """No response within timeout_ms fails retryably."""
    result, _ = await _call({"url": target.url("/slow?ms=3000"), "timeout_ms": 200})
    assert result.error_class == "Timeout"
    assert result.retryable


async def test_cancel_aborts_the_request(target: HttpTarget) -> None:
    """Cancelling the executor closes the connection: the target sees its call aborted."""
    env = _env(["127.0.0.1"])
    executor = env.registry.build("http", {"url": target.url("/slow?ms=20000")}, env)
    task = asyncio.create_task(executor.run(RunContext("r", "j", 1, "t", Sink(), "r")))
    async with asyncio.timeout(10):
        await target.wait_for_calls(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        await target.wait_until(lambda: target.calls[0].aborted)


def test_bad_http_configs() -> None:
    """Non-http URLs and ill-typed fields are config errors naming the field."""
    env = _env(())
    with pytest.raises(ExecutorConfigError, match="url"):
        env.registry.build("http", {"url": "file:///etc/passwd"}, env)
    with pytest.raises(ExecutorConfigError, match="timeout_ms"):
        env.registry.build("http", {"url": "https://x.example", "timeout_ms": "5s"}, env)
