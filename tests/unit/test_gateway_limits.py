"""Limits and bad input: sizes, rates, quotas, idempotency keys, malformed requests; never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_gateway_fakes import auth, create, harness, job_body
from tickwheel.gateway.config import GatewayConfig
from tickwheel.gateway.limits import IdempotencyKeys, RateLimiter, TokenBucket
from tickwheel.gateway.routes import ROUTES


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    """A bucket allows its burst at once, then one request per 1/rate seconds."""
    bucket = TokenBucket(rate=2.0, burst=3, tokens=3.0, updated_s=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0
    assert bucket.take(100.0) == 0.0
    assert bucket.tokens == pytest.approx(2.0)


def test_rate_limiter_is_per_team_and_rounds_retry_after_up() -> None:
    """Teams have separate buckets; the wait is whole seconds, at least one."""
    limiter = RateLimiter(rate=0.1, burst=1)
    assert limiter.take("a", 0.0) == 0
    assert limiter.take("a", 0.0) == 10
    assert limiter.take("b", 0.0) == 0


def test_idempotency_keys_tell_retry_from_reuse_and_stay_bounded() -> None:
    """A key seen with the same fingerprint is a retry, with another a reuse; old keys are evicted."""
    keys = IdempotencyKeys(capacity=2)
    assert keys.check("p", "k1", "f1") is None
    assert keys.check("p", "k1", "f1") is True
    assert keys.check("p", "k1", "f2") is False
    assert keys.check("q", "k1", "f2") is None  # keys are per principal
    keys.check("p", "k3", "f")
    assert keys.check("p", "k1", "f9") is None  # evicted


async def test_create_rate_per_team_is_429_with_retry_after() -> None:
    """Beyond the burst a team's creates get 429 with Retry-After; other teams are unaffected."""
    config = GatewayConfig(creates_per_second=0.5, create_burst=2)
    async with harness(config=config, answer=False) as h:
        statuses = []
        for i in range(3):
            response = await h.client.post(
                "/v1/jobs", json=job_body(), headers={**auth("pay-owner"), "Idempotency-Key": f"k{i}"}
            )
            statuses.append(response.status)
        assert statuses == [202, 202, 429]
        assert response.headers["Retry-After"] == "2"
        assert (await response.json())["type"].endswith("rate-limited")
        other = await h.client.post(
            "/v1/jobs", json=job_body("search"), headers={**auth("search-owner"), "Idempotency-Key": "s"}
        )
        assert other.status == 202
        retry = await h.client.post(
            "/v1/jobs", json=job_body(), headers={**auth("pay-owner"), "Idempotency-Key": "k0"}
        )
        assert retry.status == 202  # a retry was admitted already
        h.clock.mono += 2.0
        later = await h.client.post(
            "/v1/jobs", json=job_body(), headers={**auth("pay-owner"), "Idempotency-Key": "k2"}
        )
        assert later.status == 202


async def test_jobs_per_team_quota_is_403() -> None:
    """A team at its live-job limit cannot create more; the problem names the team field."""
    async with harness(config=GatewayConfig(max_jobs_per_team=1, wait_timeout_ms=200, answer_poll_ms=5)) as h:
        await create(h, key="first")
        response = await h.client.post(
            "/v1/jobs", json=job_body(), headers={**auth("pay-owner"), "Idempotency-Key": "second"}
        )
        assert response.status == 403
        problem = await response.json()
        assert problem["type"].endswith("quota-exceeded")
        assert problem["field"] == "team"


async def test_reused_idempotency_key_with_another_body_is_422() -> None:
    """One key for two different creates is a client bug, refused before anything is appended."""
    async with harness(answer=False) as h:
        headers = {**auth("pay-owner"), "Idempotency-Key": "k"}
        assert (await h.client.post("/v1/jobs", json=job_body(name="a"), headers=headers)).status == 202
        response = await h.client.post("/v1/jobs", json=job_body(name="b"), headers=headers)
        assert response.status == 422
        assert (await response.json())["field"] == "Idempotency-Key"
        assert len(h.sink.commands) == 1


async def test_body_size_limit_is_413_declared_or_chunked() -> None:
    """A body over the limit is 413, whether announced by Content-Length or streamed chunked."""
    async with harness(config=GatewayConfig(max_body_bytes=2_048)) as h:
        headers = {**auth("pay-owner"), "Idempotency-Key": "k", "Content-Type": "application/json"}
        big = json.dumps(job_body(name="x" * 5_000)).encode()
        declared = await h.client.post("/v1/jobs", data=big, headers=headers)
        assert declared.status == 413
        assert declared.content_type == "application/problem+json"

        async def chunks() -> Any:
            for start in range(0, len(big), 512):
                yield big[start : start + 512]

        streamed = await h.client.post("/v1/jobs", data=chunks(), headers=headers)
        assert streamed.status == 413
        assert h.sink.commands == []


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("malformed JSON", b'{"team": ', 400, "body"),
    ("trailing comma", b'{"team": "a",}', 400, "body"),
    ("not an object", b"[1, 2]", 422, "body"),
    ("deep nesting", b"[" * 100_00 + b"]" * 100_00, 400, "body"),
    ("NaN", json.dumps(job_body(retry={"jitter": float("nan")})).encode(), 422, "retry.jitter"),
    ("unknown field", json.dumps(job_body(colour="blue")).encode(), 422, "colour"),
    ("wrong type", json.dumps(job_body(timeout_ms="60")).encode(), 422, "timeout_ms"),
    ("bool for int", json.dumps(job_body(timeout_ms=True)).encode(), 422, "timeout_ms"),
    ("huge int", json.dumps(job_body(timeout_ms=10**40)).encode(), 422, "timeout_ms"),
    ("bad job id", json.dumps(job_body(job_id="a/../b")).encode(), 422, "job_id"),
    ("NUL in job id", json.dumps(job_body(job_id="a\u0000b")).encode(), 422, "job_id"),
    ("long job id", json.dumps(job_body(job_id="a" * 129)).encode(), 422, "job_id"),
    ("control char name", json.dumps(job_body(name="a\u0007b")).encode(), 422, "name"),
    ("unknown schedule kind", json.dumps(job_body(schedule={"kind": "weekly"})).encode(), 422, "schedule"),
    (
        "retry max below initial",
        json.dumps(job_body(retry={"backoff_initial_ms": 10, "backoff_max_ms": 1})).encode(),
        422,
        "retry",
    ),
    (
        "too many labels",
        json.dumps(job_body(labels={f"k{i}": "v" for i in range(40)})).encode(),
        422,
        "labels",
    ),
    ("invalid utf-8", b'{"team": "\xff"}', 400, "body"),
]


@pytest.mark.parametrize(("case", "body", "status", "field"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
async def test_bad_bodies_are_problems_naming_the_field(
    case: str, body: bytes, status: int, field: str
) -> None:
    """Each malformed or invalid body is a 4xx problem whose field points at the fault."""
    async with harness() as h:
        headers = {**auth("pay-owner"), "Idempotency-Key": "k", "Content-Type": "application/json"}
        response = await h.client.post("/v1/jobs", data=body, headers=headers)
        assert response.status == status, await response.text()
        problem = await response.json()
        assert problem["field"] == field
        assert h.sink.commands == []


BAD_REQUESTS: list[tuple[str, str, dict[str, str], int, str]] = [
    ("unknown query param", "/v1/jobs?colour=blue", {}, 400, "colour"),
    ("repeated query param", "/v1/jobs?limit=1&limit=2", {}, 400, "limit"),
    ("limit not a number", "/v1/jobs?limit=ten", {}, 400, "limit"),
    ("limit too big", "/v1/jobs?limit=100000", {}, 400, "limit"),
    ("bad state", "/v1/jobs?state=sleeping", {}, 400, "state"),
    ("bad cursor", "/v1/jobs?cursor=v1.AAAA", {}, 400, "cursor"),
    ("garbage cursor", "/v1/jobs?cursor=%00%ff", {}, 400, "cursor"),
    ("bad path id", "/v1/jobs/..%2F..%2Fetc", {}, 400, "job_id"),
    ("preview both kinds", "/v1/preview?expr=*+*+*+*+*&at_ms=5", {}, 400, "query"),
    ("preview count too big", "/v1/preview?expr=0+3+*+*+*&count=1000000", {}, 400, "count"),
]


@pytest.mark.parametrize(
    ("case", "url", "headers", "status", "field"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
async def test_bad_queries_and_paths_are_problems(
    case: str, url: str, headers: dict[str, str], status: int, field: str
) -> None:
    """Bad query parameters, cursors and path ids are 4xx problems naming the parameter."""
    async with harness() as h:
        response = await h.client.get(url, headers={**auth("pay-owner"), **headers})
        assert response.status == status, await response.text()
        assert (await response.json())["field"] == field


BAD_HEADERS: list[tuple[str, dict[str, str], int, str]] = [
    ("missing key", {}, 400, "Idempotency-Key"),
    ("key with space", {"Idempotency-Key": "a b"}, 400, "Idempotency-Key"),
    ("key too long", {"Idempotency-Key": "k" * 300}, 400, "Idempotency-Key"),
    ("non-JSON content type", {"Idempotency-Key": "k", "Content-Type": "text/plain"}, 415, "Content-Type"),
]


@pytest.mark.parametrize(("case", "headers", "status", "field"), BAD_HEADERS, ids=[b[0] for b in BAD_HEADERS])
async def test_bad_headers_are_problems(case: str, headers: dict[str, str], status: int, field: str) -> None:
    """Missing or malformed Idempotency-Key and content type are 4xx problems naming the header."""
    async with harness() as h:
        body = json.dumps(job_body()).encode()
        merged = {"Content-Type": "application/json", **auth("pay-owner"), **headers}
        response = await h.client.post("/v1/jobs", data=body, headers=merged)
        assert response.status == status
        assert (await response.json())["field"] == field


async def test_duplicate_idempotency_header_is_refused() -> None:
    """Two Idempotency-Key headers are ambiguous and refused."""
    async with harness() as h:
        from multidict import CIMultiDict

        headers = CIMultiDict(auth("pay-owner"))
        headers.add("Idempotency-Key", "a")
        headers.add("Idempotency-Key", "b")
        response = await h.client.post("/v1/jobs", json=job_body(), headers=headers)
        assert response.status == 400


async def test_unknown_route_and_method_are_problems() -> None:
    """Unknown paths are 404 and wrong methods 405, both as problem documents."""
    async with harness() as h:
        missing = await h.client.get("/v2/nothing")
        assert missing.status == 404
        assert missing.content_type == "application/problem+json"
        wrong = await h.client.patch("/v1/jobs", headers=auth("pay-owner"))
        assert wrong.status == 405
        assert "Allow" in wrong.headers


# ---------------------------------------------------------------------------
# Fuzz: whatever arrives, the answer is never a 500


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=15,
)
_FIELDS = st.fixed_dictionaries(
    {}, optional=dict.fromkeys(job_body(), _JSON) | {"job_id": _JSON, "pool": _JSON}
)
_WRITES = [r for r in ROUTES if r.method in ("POST", "PUT", "DELETE")]
_READS = [r for r in ROUTES if r.method == "GET"]
_SEGMENT = st.text(st.characters(codec="utf-8", exclude_characters="/?#"), min_size=1, max_size=30)


def _url(path: str, segment: str) -> str:
    from urllib.parse import quote

    return (
        path.replace("{job_id}", quote(segment))
        .replace("{run_id}", quote(segment))
        .replace("{command_id}", quote(segment))
        .replace("{file}", quote(segment))
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_WRITES),
    st.one_of(_FIELDS, _JSON),
    _SEGMENT,
    st.dictionaries(st.sampled_from(["wait", "timeout_ms", "x"]), st.text(max_size=8), max_size=2),
    st.sampled_from(["pay-owner", "pay-viewer", "search-owner", "admin"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=0, max_size=12),
)
async def test_fuzzed_writes_never_fail_with_500(
    route: Any, body: Any, segment: str, query: dict[str, str], who: str, if_match: str
) -> None:
    """Random bodies, ids, query strings and If-Match values on every write route give 4xx or 2xx."""
    async with harness(answer=False) as h:
        headers = {**auth(who), "Idempotency-Key": "fuzz", "If-Match": if_match or "1"}
        response = await h.client.request(
            route.method, _url(route.path, segment), params=query, json=body, headers=headers
        )
        assert response.status < 500, await response.text()
        if response.status >= 400:
            assert response.content_type == "application/problem+json"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_READS),
    _SEGMENT,
    st.dictionaries(
        st.sampled_from(
            [
                "limit",
                "cursor",
                "team",
                "state",
                "status",
                "from_ms",
                "to_ms",
                "expr",
                "tz",
                "count",
                "after_ms",
                "attempt",
                "at_ms",
                "spread_ms",
            ]
        ),
        st.text(max_size=12),
        max_size=4,
    ),
)
async def test_fuzzed_reads_never_fail_with_500(route: Any, segment: str, query: dict[str, str]) -> None:
    """Random ids and query parameters on every read route give 4xx or 2xx."""
    async with harness() as h:
        response = await h.client.get(_url(route.path, segment), params=query, headers=auth("admin"))
        assert response.status < 500, await response.text()
