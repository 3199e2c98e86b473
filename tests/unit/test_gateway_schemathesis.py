"""Schemathesis fuzzes every operation of the gateway's own OpenAPI document against the running app.

The app runs with the in-memory fakes (no broker) on a loopback port, served by its own event
loop in a background thread, because schemathesis calls it synchronously through requests. A
fresh app per test starts from the same seeded read model: jobs of two teams (one paused, one
one-time), runs with logs, a dead letter and answered commands.

Each operation is fuzzed with an admin's and with a team owner's token, in two passes:

* positive: schema-valid requests. Random ids and strings almost never name a job that exists,
  a cron expression that parses or a printable name, so three in four generated path ids,
  ``If-Match`` versions, schedules, names and teams are swapped for ones that do: the
  authorised success paths (200/201/202/412, ...) are reached, not only 401/404/422.
* negative: schema-violating requests, as generated, which must be refused with a 4xx.

Every built-in check runs on every response (no 5xx; documented status, content type, headers
and body; negatives rejected; missing required headers refused; a 2xx that needed a token
probed again without one and with a wrong one; undeclared methods answered 405 with
``Allow``) except ``positive_data_acceptance``: the document cannot say which schema-valid
strings are real cron expressions, IANA zones or printable names, nor which cursors belong to
a query, and a 4xx naming the field is the documented answer for those.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.unit.test_gateway_fakes import FakeLag, FakeSink, ManualClock, auth, token_table
from tests.unit.test_projection_events import T0, accepted, changed, dead_letter, life, spec
from tickwheel.gateway.app import Deps, build_app
from tickwheel.gateway.config import GatewayConfig
from tickwheel.gateway.handlers import OPENAPI_KEY
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import ReadModel
from tickwheel.schemas.model import JobAccepted
from tickwheel.settings import Settings

SEED = 20_260_101

# What the seeded read model holds, by the name of the parameter that looks it up.
KNOWN_PATH = {
    "job_id": ("nightly", "paused-1", "once-1", "search-1"),
    "run_id": ("r-1", "r-search"),
    "command_id": ("c-nightly", "c-paused-2"),
    "file": ("index.html", "app.js", "style.css"),
}
KNOWN_VERSIONS = ('"1"', "1", 'W/"1"')
VALID_CRON = ("0 3 * * *", "*/5 * * * *", "30 2 * * 0", "0 0 1 1 *")
VALID_NAMES = ("nightly", "Report für Zürich ✓", "x")
VALID_TZ = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe")


def _seeded_app() -> web.Application:
    kv = MemoryKV()
    sink = FakeSink(kv)
    sink.feeder.feed(
        *life("nightly", "payments", "r-1"),
        dead_letter("nightly"),
        accepted("paused-1", command_id="c-paused-1"),
        changed("paused-1", command_id="c-paused-2"),
        JobAccepted("once-1", "c-once-1", 1, spec(cron=None), T0),
        *life("search-1", "search", "r-search"),
    )
    # Creates are not rate limited here: the fuzzer's bursts would otherwise mostly see 429.
    config = GatewayConfig(
        wait_timeout_ms=200, answer_poll_ms=5, creates_per_second=1e6, create_burst=1_000_000
    )
    deps = Deps(ReadModel(kv), sink, FakeLag(), ManualClock())
    return build_app(Settings(min_interval_ms=60_000), config, deps=deps, tokens=token_table())


def _config(mode: str, max_examples: int) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {
                "mode": mode,
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
            },
            "checks": {
                "positive_data_acceptance": {"enabled": False},
                # RFC 6585: 428 is the precise answer to a missing If-Match.
                "missing_required_header": {"expected-statuses": [400, 401, 403, 406, 415, 422, 428]},
            },
        }
    )


# Exactly the document GET /openapi.json serves.
DOCUMENT = json.loads(_seeded_app()[OPENAPI_KEY])
positive = schemathesis.openapi.from_dict(DOCUMENT, config=_config("positive", 25))
# Only operations with inputs to get wrong; the others have nothing to negate.
_WITH_INPUTS = [
    op["operationId"]
    for ops in DOCUMENT["paths"].values()
    for op in ops.values()
    if op["parameters"] or "requestBody" in op
]
negative = schemathesis.openapi.from_dict(DOCUMENT, config=_config("negative", 12)).include(
    operation_id=_WITH_INPUTS
)


def _often(value: Any, swapped: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A draw of ``swapped`` three times in four; otherwise ``value`` as generated."""
    return st.integers(0, 3).flatmap(lambda n: swapped if n else st.just(value))


def _known(value: dict[str, Any] | None, known: Mapping[str, tuple[str, ...]]) -> st.SearchStrategy[Any]:
    names = [name for name in value or {} if name in known]
    if not value or not names:
        return st.just(value)
    chosen = st.fixed_dictionaries({name: st.sampled_from(known[name]) for name in names})
    return _often(value, chosen.map(lambda swap: {**value, **swap}))


_CRON = st.fixed_dictionaries({"expr": st.sampled_from(VALID_CRON), "tz": st.sampled_from(VALID_TZ)})


@positive.hook
def flatmap_path_parameters(
    context: schemathesis.HookContext, path_parameters: dict[str, Any] | None
) -> st.SearchStrategy[Any]:
    return _known(path_parameters, KNOWN_PATH)


@positive.hook
def flatmap_headers(
    context: schemathesis.HookContext, headers: dict[str, Any] | None
) -> st.SearchStrategy[Any]:
    return _known(headers, {"If-Match": KNOWN_VERSIONS})


@positive.hook
def flatmap_query(context: schemathesis.HookContext, query: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    if context.operation is None or context.operation.path != "/v1/preview":
        return st.just(query)
    rest = {k: v for k, v in (query or {}).items() if k != "at_ms"}
    return _often(query, _CRON.map(lambda cron: {**rest, **cron}))


@positive.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    if not isinstance(body, dict) or "team" not in body:
        return st.just(body)
    schedule = body["schedule"]
    schedules = (
        _CRON.map(lambda cron: {**schedule, **cron}) if schedule["kind"] == "cron" else st.just(schedule)
    )
    # The owner may only write its own team (as are the seeded jobs it may change); generated
    # names are mostly refused as not printable.
    swaps = st.fixed_dictionaries({"schedule": schedules, "name": st.sampled_from(VALID_NAMES)})
    return _often(body, swaps.map(lambda swap: {**body, "team": "payments", **swap}))


@pytest.fixture
def base_url() -> Iterator[str]:
    """A freshly seeded app on a free loopback port, served by an event loop in a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="gateway-under-fuzz", daemon=True)
    thread.start()
    runner = web.AppRunner(_seeded_app())

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port: int = runner.addresses[0][1]
        return port

    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


# The server's state is meant to carry across one operation's examples (a created job is then
# read, changed, deleted); each test still starts from the seeded state.
_ONE_SERVER_PER_TEST = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def _conforms(case: schemathesis.Case[Any], who: str, base_url: str) -> None:
    case.call_and_validate(base_url=base_url, headers=auth(who), timeout=10)


@pytest.mark.parametrize("who", ["admin", "pay-owner"])
@positive.parametrize()
@_ONE_SERVER_PER_TEST
def test_valid_requests_conform(case: schemathesis.Case[Any], who: str, base_url: str) -> None:
    """Schema-valid requests to every operation get no 5xx and a documented status, type and body."""
    _conforms(case, who, base_url)


@pytest.mark.parametrize("who", ["admin", "pay-owner"])
@negative.parametrize()
@_ONE_SERVER_PER_TEST
def test_invalid_requests_are_refused(case: schemathesis.Case[Any], who: str, base_url: str) -> None:
    """Schema-violating requests to every operation are refused with a documented 4xx problem."""
    _conforms(case, who, base_url)
