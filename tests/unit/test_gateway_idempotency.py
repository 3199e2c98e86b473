"""One Idempotency-Key, one request: refused for another request on any gateway, after restarts.

A restart is a second app over the same fake log and read model with an empty in-process key
cache; two apps open at once are two gateway instances sharing the log.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientResponse

from tests.unit.test_gateway_fakes import FakeLag, FakeSink, Harness, auth, harness, job_body
from tests.unit.test_projection_events import audit
from tickwheel.gateway.config import GatewayConfig
from tickwheel.gateway.handlers import belongs
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.views import CommandAnswer, KeyClaim, audit_fingerprint
from tickwheel.schemas.model import command_id_for

FP_A, FP_B = "a" * 64, "b" * 64


async def post_job(h: Harness, key: str, *, wait: bool = False, **extra: Any) -> ClientResponse:
    path = "/v1/jobs?wait=committed" if wait else "/v1/jobs"
    return await h.client.post(
        path, json=job_body(**extra), headers={**auth("pay-owner"), "Idempotency-Key": key}
    )


async def post_action(h: Harness, job_id: str, verb: str, key: str) -> ClientResponse:
    return await h.client.post(
        f"/v1/jobs/{job_id}/{verb}?wait=committed", headers={**auth("pay-owner"), "Idempotency-Key": key}
    )


async def assert_reused(response: ClientResponse) -> None:
    assert response.status == 422, await response.text()
    problem = await response.json()
    assert problem["type"].endswith("idempotency-key-reused")
    assert problem["field"] == "Idempotency-Key"


# ---------------------------------------------------------------------------
# (b) the key's claim on the log: unanswered window, restarts, other instances


async def test_key_reused_for_another_job_after_a_restart_is_422_before_any_answer() -> None:
    """No processor: key k-1 creates job-a, the gateway restarts, k-1 for job-b is 422, not appended."""
    sink = FakeSink(MemoryKV(), answer=False)
    async with harness(sink=sink) as h:
        assert (await post_job(h, "k-1", job_id="job-a")).status == 202
        await assert_reused(await post_job(h, "k-1", job_id="job-b"))
    async with harness(sink=sink) as restarted:
        await assert_reused(await post_job(restarted, "k-1", job_id="job-b"))
    assert [c.meta.job_id for c in sink.commands] == ["job-a"]


async def test_two_gateways_share_the_claim_of_a_key() -> None:
    """A key taken on one gateway is refused for another body on a second one open at the same time."""
    sink = FakeSink(MemoryKV(), answer=False)
    async with harness(sink=sink) as first, harness(sink=sink) as second:
        assert (await post_job(first, "shared", name="one")).status == 202
        await assert_reused(await post_job(second, "shared", name="two"))
        assert (await post_job(second, "shared", name="one")).status == 202  # a retry elsewhere
    assert {c.meta.command_id for c in sink.commands} == {command_id_for("shared", "alice")}


async def test_same_request_after_a_restart_is_a_retry_of_the_same_command() -> None:
    """The original request retried after a restart appends the same command id again (202)."""
    sink = FakeSink(MemoryKV(), answer=False)
    async with harness(sink=sink) as h:
        first = await (await post_job(h, "k-2", job_id="job-a")).json()
    async with harness(sink=sink) as restarted:
        response = await post_job(restarted, "k-2", job_id="job-a")
        assert response.status == 202
        assert (await response.json())["command_id"] == first["command_id"]
    assert [c.meta.command_id for c in sink.commands] == [first["command_id"]] * 2


async def test_retry_known_only_from_the_log_is_not_rate_limited_again() -> None:
    """With the key cache off, a retry is recognised by its claim and not charged a second create."""
    config = GatewayConfig(creates_per_second=0.01, create_burst=1, idempotency_cache=0)
    async with harness(config=config, answer=False) as h:
        assert (await post_job(h, "k-3")).status == 202
        assert (await post_job(h, "k-3")).status == 202
        assert (await post_job(h, "k-4")).status == 429


async def test_audit_record_carries_the_request_fingerprint() -> None:
    """Each mutation's audit detail keeps its text and ends with the request fingerprint."""
    async with harness(answer=False) as h:
        await post_job(h, "k-5", name="first")
        await post_job(h, "k-5", name="first")
        await post_job(h, "k-6", name="second")
    details = [a.detail for a in h.sink.audits]
    assert details[0].startswith("first request-sha256=")
    fingerprints = [audit_fingerprint(d) for d in details]
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]
    assert all(len(f) == 64 for f in fingerprints)


async def test_claim_from_before_fingerprints_decides_by_job_and_action() -> None:
    """An audit record without a fingerprint still refuses the key for another job or action."""
    sink = FakeSink(MemoryKV(), answer=False)
    sink.feeder.feed(audit(command_id_for("old", "alice"), "job-a", fingerprint=""))
    async with harness(sink=sink) as h:
        await assert_reused(await post_job(h, "old", job_id="job-b"))
        assert (await post_job(h, "old", job_id="job-a", name="any")).status == 202  # the limit
    assert [c.meta.job_id for c in sink.commands] == ["job-a"]


# ---------------------------------------------------------------------------
# (a) an answer that is not this request's


async def test_answer_naming_another_job_is_422_not_a_misleading_success() -> None:
    """Key k-1 answered for job-a; after a restart, k-1 for job-b is 422 (its claim not even folded)."""
    sink = FakeSink(MemoryKV(), fold_audit=False)
    async with harness(sink=sink) as h:
        created = await post_job(h, "k-1", wait=True, job_id="job-a")
        assert created.status == 201
    async with harness(sink=sink) as restarted:
        await assert_reused(await post_job(restarted, "k-1", wait=True, job_id="job-b"))
        again = await post_job(restarted, "k-1", wait=True, job_id="job-a")
        assert again.status == 201  # the original request still gets its original outcome
        body = await again.json()
        assert (body["job_id"], body["job"]["job_id"]) == ("job-a", "job-a")
    assert len(sink.commands) == 1


async def test_answer_of_another_action_on_the_same_job_is_422() -> None:
    """A key that paused a job is refused for cancelling it, even with no claim folded."""
    sink = FakeSink(MemoryKV(), fold_audit=False)
    async with harness(sink=sink) as h:
        job_id = (await (await post_job(h, "mk", wait=True)).json())["job_id"]
        assert (await post_action(h, job_id, "pause", "act")).status == 200
    async with harness(sink=sink) as restarted:
        await assert_reused(await post_action(restarted, job_id, "cancel", "act"))
        assert (await post_action(restarted, job_id, "pause", "act")).status == 200
    assert [type(c).__name__ for c in sink.commands] == ["CreateJob", "PauseJob"]


@pytest.mark.parametrize(
    ("claim", "answer", "expected"),
    [
        (None, None, True),
        (KeyClaim("c", "p", "create", "job-a", 1, FP_A), None, True),
        (KeyClaim("c", "p", "create", "job-a", 1, FP_B), None, False),
        (KeyClaim("c", "p", "create", "job-a", 1, ""), None, True),
        (KeyClaim("c", "p", "create", "job-b", 1, ""), None, False),
        (KeyClaim("c", "p", "pause", "job-a", 1, ""), None, False),
        (None, CommandAnswer("c", "job-a", "accepted", 1, 1, "active", "created"), True),
        (None, CommandAnswer("c", "job-b", "accepted", 1, 1, "active", "created"), False),
        (None, CommandAnswer("c", "job-a", "changed", 1, 1, "paused", "paused"), False),
        (None, CommandAnswer("c", "job-a", "rejected", 1, reason="already_exists"), True),
        (None, CommandAnswer("c", "job-a", "changed", 1, 1, "active", "some_new_change"), True),
        # Two gateways took the key at once: the claim is ours, the answer the other request's.
        (
            KeyClaim("c", "p", "create", "job-a", 1, FP_A),
            CommandAnswer("c", "job-b", "accepted", 1, 1, "active", "created"),
            False,
        ),
    ],
)
def test_what_belongs_to_a_create_of_job_a(
    claim: KeyClaim | None, answer: CommandAnswer | None, expected: bool
) -> None:
    """A claim decides by fingerprint (by job and action when it has none); an answer by job and change."""
    assert belongs(claim, answer, FP_A, "job-a", "create") is expected


# ---------------------------------------------------------------------------
# The start fence


async def test_mutations_wait_for_the_read_model_to_reach_the_log_end_then_503() -> None:
    """Until the read model has folded audit and job-events to their end, a mutation is 503."""
    lag = FakeLag(end_offsets={("audit", 0): 3, ("job-events", 1): 2, ("runs", 0): 99})
    config = GatewayConfig(catchup_timeout_ms=0)
    async with harness(answer=False, config=config, lag=lag) as h:
        held = await post_job(h, "f-1")
        assert held.status == 503
        assert held.headers["Retry-After"] == "1"
        h.feeder.projector.apply([], {("audit", 0): 3, ("job-events", 1): 2})  # runs need not
        assert (await post_job(h, "f-1", name="other")).status == 202  # 503 remembered no key
        lag.end_offsets = None  # once passed, the fence does not ask again
        assert (await post_job(h, "f-2")).status == 202
    assert len(h.sink.commands) == 2


async def test_log_end_unknown_is_503() -> None:
    """A gateway that cannot ask the log where it ends refuses mutations with 503, appends nothing."""
    config = GatewayConfig(catchup_timeout_ms=0)
    async with harness(answer=False, config=config, lag=FakeLag(end_offsets=None)) as h:
        assert (await post_job(h, "f-3")).status == 503
        assert h.sink.commands == []
