"""Tokens, roles and team isolation on every route of the gateway."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from tests.unit.test_gateway_fakes import TOKENS, Harness, auth, create, harness, job_body
from tests.unit.test_projection_events import chunk, dead_letter, due
from tickwheel.gateway.auth import Role, TokenError, TokenTable, bearer_token, example_tokens_json
from tickwheel.gateway.routes import ROUTES


def test_tokens_authenticate_to_their_principal() -> None:
    """A configured token names its principal, team and role; anything else names no one."""
    table = TokenTable.load(
        file=None,
        env_json=example_tokens_json([("a" * 20, "alice", "payments", Role.OWNER)]),
        admin_token="b" * 20,
    )
    alice = table.authenticate("a" * 20)
    assert alice is not None
    assert (alice.name, alice.team, alice.role) == ("alice", "payments", Role.OWNER)
    admin = table.authenticate("b" * 20)
    assert admin is not None
    assert admin.role is Role.ADMIN
    assert table.authenticate("a" * 19) is None
    assert table.authenticate("") is None


def test_tokens_file_is_read_and_validated(tmp_path: Path) -> None:
    """The tokens file must be a list of complete entries with long tokens and known roles."""
    good = tmp_path / "tokens.json"
    good.write_text(example_tokens_json([("t" * 16, "svc", "ads", Role.VIEWER)]))
    assert len(TokenTable.load(file=good, env_json=None, admin_token=None)) == 1
    for text in (
        '{"token": 1}',
        '[{"token": "short", "principal": "p", "team": "t", "role": "owner"}]',
        json.dumps([{"token": "x" * 20, "principal": "p", "team": "t", "role": "god"}]),
        "not json",
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(TokenError):
            TokenTable.load(file=bad, env_json=None, admin_token=None)
    with pytest.raises(TokenError):
        TokenTable.load(file=tmp_path / "missing.json", env_json=None, admin_token=None)
    with pytest.raises(TokenError):
        TokenTable.load(file=good, env_json=good.read_text(), admin_token=None)  # same token twice


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer a\x01b", None),
        ("Bearer " + "x" * 600, None),
    ],
)
def test_bearer_header_parsing(header: str | None, token: str | None) -> None:
    """Only a well-formed bearer header yields a token."""
    assert bearer_token(header) == token


# ---------------------------------------------------------------------------
# Every authenticated route refuses a request without a valid token


AUTH_ROUTES = [r for r in ROUTES if r.auth]


def _concrete(path: str) -> str:
    return path.replace("{job_id}", "job-1").replace("{run_id}", "r-1").replace("{command_id}", "c-1")


@pytest.mark.parametrize("route", AUTH_ROUTES, ids=[r.operation_id for r in AUTH_ROUTES])
@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789", "Token abc"])
async def test_every_route_requires_a_token(route: Any, header: str | None) -> None:
    """Without a valid bearer token every /v1 route answers 401 with WWW-Authenticate."""
    async with harness() as h:
        headers = {} if header is None else {"Authorization": header}
        response = await h.client.request(route.method, _concrete(route.path), headers=headers)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert h.sink.commands == []


# ---------------------------------------------------------------------------
# Team isolation: a token of team "search" can neither read nor change team "payments"


Case = Callable[[Harness, dict[str, str]], Awaitable[ClientResponse]]


async def _payments_world(h: Harness) -> dict[str, str]:
    created = await create(h, key="iso")
    job_id = created["job_id"]
    h.feeder.feed(due("r-pay", job_id), chunk("r-pay", job_id), dead_letter(job_id))
    return {"job_id": job_id, "run_id": "r-pay", "command_id": created["command_id"]}


def _post(path: str, body: Any = None) -> Case:
    async def case(h: Harness, ids: dict[str, str]) -> ClientResponse:
        headers = {**auth("search-owner"), "Idempotency-Key": "intruder", "If-Match": "1"}
        return await h.client.post(path.format(**ids), json=body, headers=headers)

    return case


def _method(method: str, path: str, body: Any = None) -> Case:
    async def case(h: Harness, ids: dict[str, str]) -> ClientResponse:
        headers = {**auth("search-owner"), "If-Match": "1"}
        return await h.client.request(method, path.format(**ids), json=body, headers=headers)

    return case


ISOLATION: dict[str, tuple[Case, tuple[int, ...]]] = {
    "create_job": (_post("/v1/jobs", job_body("payments")), (403,)),
    "list_jobs": (_method("GET", "/v1/jobs?team=payments"), (403,)),
    "get_job": (_method("GET", "/v1/jobs/{job_id}"), (404,)),
    "update_job": (_method("PUT", "/v1/jobs/{job_id}", job_body("payments")), (404,)),
    "delete_job": (_method("DELETE", "/v1/jobs/{job_id}"), (404,)),
    "pause_job": (_post("/v1/jobs/{job_id}/pause"), (404,)),
    "resume_job": (_post("/v1/jobs/{job_id}/resume"), (404,)),
    "cancel_job": (_post("/v1/jobs/{job_id}/cancel"), (404,)),
    "trigger_job": (_post("/v1/jobs/{job_id}/trigger"), (404,)),
    "preview_job": (_method("GET", "/v1/jobs/{job_id}/preview"), (404,)),
    "list_runs": (_method("GET", "/v1/jobs/{job_id}/runs"), (404,)),
    "get_run": (_method("GET", "/v1/runs/{run_id}"), (404,)),
    "get_logs": (_method("GET", "/v1/runs/{run_id}/logs"), (404,)),
    "get_command": (_method("GET", "/v1/commands/{command_id}"), (404,)),
    "get_stats": (_method("GET", "/v1/stats?team=payments"), (403,)),
    "list_dead_letters": (_method("GET", "/v1/dead-letters?team=payments"), (403,)),
}
# These show no team's objects: the caller's own identity, and an unsaved schedule's fires.
NO_TEAM_DATA = {"whoami", "preview_schedule"}


def test_isolation_cases_cover_every_authenticated_route() -> None:
    """Every authenticated route has a cross-team case below (or shows no team's data)."""
    assert set(ISOLATION) | NO_TEAM_DATA == {r.operation_id for r in AUTH_ROUTES}


@pytest.mark.parametrize("operation", sorted(ISOLATION))
async def test_other_team_can_neither_read_nor_change(operation: str) -> None:
    """A team-search owner gets 403/404 on team-payments objects, and nothing is appended."""
    case, statuses = ISOLATION[operation]
    async with harness() as h:
        ids = await _payments_world(h)
        before = len(h.sink.commands)
        response = await case(h, ids)
        assert response.status in statuses, await response.text()
        assert response.content_type == "application/problem+json"
        assert '"spec"' not in await response.text()  # no object content leaks into the problem
        assert len(h.sink.commands) == before


async def test_unscoped_listings_show_only_the_callers_team() -> None:
    """Listing jobs, stats and dead letters without a team shows only the caller's own team."""
    async with harness() as h:
        await _payments_world(h)
        headers = auth("search-owner")
        assert (await (await h.client.get("/v1/jobs", headers=headers)).json())["items"] == []
        assert (await (await h.client.get("/v1/dead-letters", headers=headers)).json())["items"] == []
        stats = await (await h.client.get("/v1/stats", headers=headers)).json()
        assert "payments" not in stats["teams"]


async def test_viewer_reads_but_cannot_change() -> None:
    """A viewer of the team sees its jobs but every change is 403 and appends nothing."""
    async with harness() as h:
        ids = await _payments_world(h)
        headers = {**auth("pay-viewer"), "Idempotency-Key": "v", "If-Match": "1"}
        assert (await h.client.get(f"/v1/jobs/{ids['job_id']}", headers=headers)).status == 200
        before = len(h.sink.commands)
        for action in ("pause", "resume", "cancel", "trigger"):
            assert (await h.client.post(f"/v1/jobs/{ids['job_id']}/{action}", headers=headers)).status == 403
        assert (
            await h.client.put(f"/v1/jobs/{ids['job_id']}", json=job_body(), headers=headers)
        ).status == 403
        assert (await h.client.delete(f"/v1/jobs/{ids['job_id']}", headers=headers)).status == 403
        assert (await h.client.post("/v1/jobs", json=job_body(), headers=headers)).status == 403
        assert len(h.sink.commands) == before


async def test_admin_works_across_teams() -> None:
    """An admin reads and changes any team's jobs and sees every team's statistics."""
    async with harness() as h:
        ids = await _payments_world(h)
        headers = {**auth("admin"), "Idempotency-Key": "adm"}
        assert (await h.client.get(f"/v1/runs/{ids['run_id']}", headers=headers)).status == 200
        paused = await h.client.post(f"/v1/jobs/{ids['job_id']}/pause?wait=committed", headers=headers)
        assert paused.status == 200
        assert h.sink.audits[-1].principal == TOKENS["admin"][1]
        stats = await (await h.client.get("/v1/stats", headers=headers)).json()
        assert "payments" in stats["teams"]
