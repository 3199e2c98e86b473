"""Gateway HTTP behaviour with a fake command log and an in-memory read model."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_gateway_fakes import NOW_MS, auth, create, harness, job_body
from tests.unit.test_projection_events import chunk, dead_letter, due, started, succeeded
from tickwheel.gateway.config import GatewayConfig
from tickwheel.schemas.model import (
    CreateJob,
    OneTime,
    PauseJob,
    TriggerJob,
    UpdateJob,
    command_id_for,
    manual_run_id_for,
)


async def test_create_without_wait_appends_command_and_audit() -> None:
    """A create answers 202 with command and job ids, after appending the command and its audit record."""
    async with harness(answer=False) as h:
        response = await h.client.post(
            "/v1/jobs",
            json=job_body(),
            headers={**auth("pay-owner"), "Idempotency-Key": "k-1", "X-Request-Id": "req-1"},
        )
        assert response.status == 202
        body = await response.json()
        (command,) = h.sink.commands
        assert isinstance(command, CreateJob)
        assert body["command_id"] == command.meta.command_id == command_id_for("k-1", "alice")
        assert body["job_id"] == command.meta.job_id
        assert body["state"] == "pending"
        assert response.headers["Location"] == f"/v1/commands/{body['command_id']}"
        (audit,) = h.sink.audits
        assert (audit.principal, audit.team, audit.request_id, audit.command_id, audit.action) == (
            "alice",
            "payments",
            "req-1",
            command.meta.command_id,
            "create",
        )
        assert command.spec.executor.config_json == '{"url":"http://127.0.0.1:9/echo"}'


async def test_retried_create_is_one_command_id_and_one_job() -> None:
    """Retrying a create with the same key gives the same command id, job id and response; one job exists."""
    async with harness() as h:
        first = await create(h, key="same")
        second = await create(h, key="same")
        assert first == second
        assert {c.meta.command_id for c in h.sink.commands} == {first["command_id"]}
        listed = await (await h.client.get("/v1/jobs", headers=auth("pay-owner"))).json()
        assert [j["job_id"] for j in listed["items"]] == [first["job_id"]]


async def test_answered_command_is_not_appended_again() -> None:
    """A retry of an already answered command replays the answer without appending it again."""
    async with harness() as h:
        await create(h, key="once")
        await create(h, key="once")
        assert len(h.sink.commands) == 1


async def test_wait_committed_returns_job_read_your_writes() -> None:
    """?wait=committed answers 201 with the processor's answer and the job as now stored."""
    async with harness() as h:
        body = await create(h, job_id="nightly-report")
        assert body["state"] == "accepted"
        assert body["answer"]["version"] == 1
        assert body["job"]["job_id"] == "nightly-report"
        assert body["job"]["status"] == "active"
        assert body["job"]["next_fires"][0]["local_iso"].endswith("+01:00")


async def test_wait_timeout_answers_202_with_the_command_id() -> None:
    """When no answer comes within the timeout, the answer is 202 with the command id to poll."""
    async with harness(answer=False) as h:
        response = await h.client.post(
            "/v1/jobs?wait=committed&timeout_ms=0",
            json=job_body(),
            headers={**auth("pay-owner"), "Idempotency-Key": "k"},
        )
        assert response.status == 202
        assert (await response.json())["state"] == "pending"


async def test_rejection_is_a_problem_with_the_field() -> None:
    """A create of an existing job id is answered 409 with the field the processor named."""
    async with harness() as h:
        await create(h, key="a", job_id="dup")
        response = await h.client.post(
            "/v1/jobs?wait=committed",
            json=job_body(job_id="dup"),
            headers={**auth("pay-owner"), "Idempotency-Key": "b"},
        )
        assert response.status == 409
        assert response.content_type == "application/problem+json"
        problem = await response.json()
        assert problem["field"] == "job_id"
        assert "already_exists" in problem["detail"]


async def test_get_job_has_etag_and_next_fires_with_spread() -> None:
    """GET shows the job, its version as ETag, and next fires including the spread offset."""
    async with harness() as h:
        created = await create(h, spread_ms=60_000)
        response = await h.client.get(f"/v1/jobs/{created['job_id']}", headers=auth("pay-viewer"))
        assert response.status == 200
        assert response.headers["ETag"] == '"1"'
        job = await response.json()
        fire = job["next_fires"][0]
        assert 0 <= fire["fire_at_ms"] - fire["at_ms"] < 60_000
        assert fire["at_ms"] > NOW_MS


async def test_update_requires_if_match_and_refuses_stale_versions() -> None:
    """PUT needs If-Match (428), refuses an older version (412) and appends UpdateJob for the current one."""
    async with harness() as h:
        job_id = (await create(h))["job_id"]
        url, body = f"/v1/jobs/{job_id}?wait=committed", job_body(name="renamed")
        assert (await h.client.put(url, json=body, headers=auth("pay-owner"))).status == 428
        bad = await h.client.put(url, json=body, headers={**auth("pay-owner"), "If-Match": "banana"})
        assert bad.status == 400
        ok = await h.client.put(url, json=body, headers={**auth("pay-owner"), "If-Match": '"1"'})
        assert ok.status == 200, await ok.text()
        assert (await ok.json())["job"]["spec"]["name"] == "renamed"
        assert isinstance(h.sink.commands[-1], UpdateJob)
        stale = await h.client.put(url, json=body, headers={**auth("pay-owner"), "If-Match": '"1"'})
        assert stale.status == 412
        assert (await stale.json())["field"] == "If-Match"


async def test_update_cannot_move_a_job_to_another_team() -> None:
    """A job's team is immutable: a PUT naming another team is a 422 on field team."""
    async with harness() as h:
        job_id = (await create(h, who="admin"))["job_id"]
        response = await h.client.put(
            f"/v1/jobs/{job_id}", json=job_body(team="search"), headers={**auth("admin"), "If-Match": "1"}
        )
        assert response.status == 422
        assert (await response.json())["field"] == "team"


async def test_pause_resume_cancel_delete_change_status() -> None:
    """Each lifecycle action appends its command and the answered status shows on the job."""
    async with harness() as h:
        job_id = (await create(h))["job_id"]
        for action, status in (("pause", "paused"), ("resume", "active"), ("cancel", "cancelled")):
            response = await h.client.post(
                f"/v1/jobs/{job_id}/{action}?wait=committed",
                headers={**auth("pay-owner"), "Idempotency-Key": action},
            )
            assert response.status == 200, await response.text()
            assert (await response.json())["job"]["status"] == status
        assert isinstance(h.sink.commands[1], PauseJob)
        deleted = await h.client.delete(f"/v1/jobs/{job_id}?wait=committed", headers=auth("pay-owner"))
        assert deleted.status == 200
        listed = await (await h.client.get("/v1/jobs", headers=auth("pay-owner"))).json()
        assert listed["items"] == []
        shown = await (await h.client.get("/v1/jobs?state=deleted", headers=auth("pay-owner"))).json()
        assert [j["job_id"] for j in shown["items"]] == [job_id]


async def test_trigger_names_its_run_before_and_after_commit() -> None:
    """Trigger answers with the manual run id derived from the command id, which then shows in runs."""
    async with harness() as h:
        job_id = (await create(h))["job_id"]
        response = await h.client.post(
            f"/v1/jobs/{job_id}/trigger?wait=committed",
            headers={**auth("pay-owner"), "Idempotency-Key": "t1"},
        )
        body = await response.json()
        assert isinstance(h.sink.commands[-1], TriggerJob)
        assert body["run_id"] == manual_run_id_for(body["command_id"]) == body["answer"]["reason"]
        runs = await (await h.client.get(f"/v1/jobs/{job_id}/runs", headers=auth("pay-viewer"))).json()
        assert [r["run_id"] for r in runs["items"]] == [body["run_id"]]


async def test_runs_run_detail_and_logs() -> None:
    """Run history, run detail with attempts, and paged logs reflect the folded worker events."""
    async with harness() as h:
        job_id = (await create(h))["job_id"]
        h.feeder.feed(
            due("r-1", job_id),
            started("r-1", job_id),
            chunk("r-1", job_id, seq=0),
            chunk("r-1", job_id, seq=1, data="done\n"),
            succeeded("r-1", job_id),
        )
        run = await (await h.client.get("/v1/runs/r-1", headers=auth("pay-viewer"))).json()
        assert run["status"] == "succeeded"
        assert run["attempts"][0]["worker_id"] == "w-1"
        assert run["attempts"][0]["duration_ms"] == 2_000
        first = await (await h.client.get("/v1/runs/r-1/logs?limit=1", headers=auth("pay-viewer"))).json()
        rest = await (
            await h.client.get(f"/v1/runs/r-1/logs?cursor={first['next_cursor']}", headers=auth("pay-viewer"))
        ).json()
        assert [x["data"] for x in first["items"] + rest["items"]] == ["hello\n", "done\n"]
        filtered = await (
            await h.client.get(f"/v1/jobs/{job_id}/runs?status=running", headers=auth("pay-viewer"))
        ).json()
        assert filtered["items"] == []
        backwards = await h.client.get(
            f"/v1/jobs/{job_id}/runs?from_ms=5&to_ms=1", headers=auth("pay-viewer")
        )
        assert backwards.status == 400
        assert (await backwards.json())["field"] == "from_ms"


async def test_preview_of_a_job_and_of_an_unsaved_schedule_shows_dst_flags() -> None:
    """Preview lists next fires with DST flags: 02:30 New York on spring-forward day shifts to 03:00."""
    async with harness() as h:
        march = 1_772_668_800_000  # 2026-03-05T00:00Z, before the 2026-03-08 spring-forward
        url = f"/v1/preview?expr=30+2+*+*+*&tz=America/New_York&after_ms={march}&count=5"
        preview = await (await h.client.get(url, headers=auth("pay-viewer"))).json()
        flagged = [f for f in preview["fires"] if f["flags"]]
        assert flagged[0]["local_iso"] == "2026-03-08T03:00:00-04:00"
        assert flagged[0]["flags"] == ["dst_gap_shifted"]
        job_id = (await create(h))["job_id"]
        response = await h.client.get(f"/v1/jobs/{job_id}/preview?count=3", headers=auth("pay-viewer"))
        assert len((await response.json())["fires"]) == 3


async def test_invalid_cron_and_too_frequent_schedule_are_422_on_the_field() -> None:
    """Cron validity and the minimum interval are checked before anything is appended."""
    async with harness() as h:
        for expr, message in (("61 * * * *", "malformed"), ("*/10 * * * * *", "minimum interval")):
            body = job_body(schedule={"kind": "cron", "expr": expr})
            response = await h.client.post(
                "/v1/jobs",
                json=body,
                headers={**auth("pay-owner"), "Idempotency-Key": message.replace(" ", "-")},
            )
            problem = await response.json()
            assert response.status == 422
            assert problem["field"] == "schedule.expr"
            assert message in problem["detail"]
        bad_zone = job_body(schedule={"kind": "cron", "expr": "0 3 * * *", "tz": "Mars/Olympus"})
        response = await h.client.post(
            "/v1/jobs", json=bad_zone, headers={**auth("pay-owner"), "Idempotency-Key": "z"}
        )
        assert (await response.json())["field"] == "schedule.tz"
        assert h.sink.commands == []


async def test_stats_and_dead_letters_for_the_on_call_page() -> None:
    """Stats show per-team counts, rates and projection lag; dead letters list the team's own."""
    async with harness() as h:
        job_id = (await create(h))["job_id"]
        h.feeder.feed(
            due("r-1", job_id, not_before_ms=NOW_MS),
            started("r-1", job_id, at_ms=NOW_MS + 40),
            dead_letter(job_id),
        )
        h.lag.value = {"runs": 3, "job-events": 4}
        stats = await (await h.client.get("/v1/stats", headers=auth("pay-viewer"))).json()
        team = stats["teams"]["payments"]
        assert team["jobs"] == {"active": 1}
        assert team["lag_count"] == 1
        assert team["lag_mean_ms"] == 40.0
        assert team["dead_letters"] == 1
        assert stats["projection"]["lag"] == 7
        letters = await (await h.client.get("/v1/dead-letters", headers=auth("pay-viewer"))).json()
        assert [d["job_id"] for d in letters["items"]] == [job_id]


async def test_health_ready_and_metrics() -> None:
    """healthz is always ok; readyz reports Kafka and projection lag; /metrics is Prometheus text."""
    async with harness(config=GatewayConfig(max_ready_lag=5)) as h:
        assert (await h.client.get("/healthz")).status == 200
        assert (await h.client.get("/readyz")).status == 200
        h.lag.value = {"runs": 6}
        not_ready = await h.client.get("/readyz")
        assert not_ready.status == 503
        assert (await not_ready.json())["checks"]["projections"]["ok"] is False
        h.lag.value = {"runs": 0}
        h.sink.down = True
        assert (await (await h.client.get("/readyz")).json())["checks"]["kafka"]["ok"] is False
        await h.client.get("/v1/whoami", headers=auth("pay-owner"))
        text = await (await h.client.get("/metrics")).text()
        assert 'tickwheel_http_request_seconds_count{method="GET",route="/v1/whoami",status="200"}' in text
        assert "tickwheel_projection_lag_records" in text


async def test_log_unreachable_is_503_with_retry_after() -> None:
    """When the command log cannot be reached the answer is 503 with Retry-After, never 500."""
    async with harness() as h:
        h.sink.down = True
        response = await h.client.post(
            "/v1/jobs", json=job_body(), headers={**auth("pay-owner"), "Idempotency-Key": "k"}
        )
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"


async def test_command_lookup_shows_the_answer() -> None:
    """GET /v1/commands/{id} shows the processor's answer; unknown ids are 404."""
    async with harness() as h:
        created = await create(h)
        found = await (
            await h.client.get(f"/v1/commands/{created['command_id']}", headers=auth("pay-viewer"))
        ).json()
        assert found["state"] == "accepted"
        assert (await h.client.get("/v1/commands/c-unknown", headers=auth("pay-viewer"))).status == 404


async def test_ui_is_served_when_installed(tmp_path: Path) -> None:
    """/ui serves static/index.html when the UI is installed, and a problem 404 when not."""
    async with harness(static_dir=tmp_path) as h:
        missing = await h.client.get("/ui")
        assert missing.status == 404
        assert missing.content_type == "application/problem+json"
        (tmp_path / "index.html").write_text("<html>tickwheel</html>")
        (tmp_path / "app.js").write_text("// js")
        assert "tickwheel" in await (await h.client.get("/ui")).text()
        assert (await h.client.get("/ui/app.js")).status == 200
        assert (await h.client.get("/ui/..%2Fsecret")).status == 404


async def test_ui_files_have_the_media_type_of_their_suffix(tmp_path: Path) -> None:
    """UI files are served as the gateway states per suffix, not as the host's mime.types guess."""
    async with harness(static_dir=tmp_path) as h:
        for name, media in (
            ("index.html", "text/html"),
            ("app.js", "text/javascript"),
            ("style.css", "text/css"),
            ("font.woff2", "application/octet-stream"),
        ):
            (tmp_path / name).write_text("x")
            response = await h.client.get(f"/ui/{name}")
            assert (response.status, response.content_type) == (200, media), name


async def test_integral_floats_are_integers_but_strings_and_fractions_are_not() -> None:
    """60000.0 is the integer 60000 (as JSON Schema's integer says); 1.5 and "60000" stay 422."""
    async with harness(answer=False) as h:
        headers = {**auth("pay-owner"), "Idempotency-Key": "floats"}
        at_ms = float(NOW_MS + 3_600_000)
        body = job_body(
            timeout_ms=60_000.0, retry={"max_attempts": 2.0}, schedule={"kind": "once", "at_ms": at_ms}
        )
        assert (await h.client.post("/v1/jobs", json=body, headers=headers)).status == 202
        (command,) = h.sink.commands
        assert isinstance(command, CreateJob)
        spec = command.spec
        assert (spec.timeout_ms, spec.retry.max_attempts, spec.schedule) == (60_000, 2, OneTime(int(at_ms)))
        assert type(spec.timeout_ms) is int
        for bad in (1.5, "60000"):
            response = await h.client.post(
                "/v1/jobs", json=job_body(timeout_ms=bad), headers={**headers, "Idempotency-Key": "x"}
            )
            assert response.status == 422
            assert (await response.json())["field"] == "timeout_ms"
