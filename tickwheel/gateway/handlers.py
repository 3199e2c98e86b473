"""The endpoint handlers. Each takes a validated :class:`Call` and returns a :class:`Reply`.

Authorization, in one place per kind of object: a job is visible to principals who may read
its team and otherwise does not exist (404); visible but not writable is 403. Runs and logs
take their team from the run, or from its job while the run's dispatch is not folded yet.

Mutations: the command id derives from the ``Idempotency-Key`` and the principal, so a
retried request appends the same command, which the processor handles once. A command whose
answer is already in the read model is not appended again. Without ``?wait=committed`` the
answer is 202 with what is known now; with it, the processor's answer (201/200 or a problem),
or 202 when the wait times out.

One key, one request: the processor dedupes command ids per job only, so a key reused for
another request (another job, another body) must be refused here, by any gateway and after
any restart (:func:`_check_key`). The audit record of each mutation carries the request's
fingerprint; the read model folds the first one per command id into a key claim.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tickwheel.gateway.auth import Principal, Role
from tickwheel.gateway.context import Call, Reply
from tickwheel.gateway.models import (
    JOB_ID_PATTERN,
    STATIC_NAME_PATTERN,
    CheckOut,
    DeadLetterPage,
    HealthOut,
    JobCreateIn,
    JobPage,
    JobSpecIn,
    LogPage,
    PreviewOut,
    ProjectionOut,
    RunPage,
    StatsOut,
    WaitQuery,
    WhoAmIOut,
    spec_from_api,
)
from tickwheel.gateway.present import (
    command_out,
    dead_letter_out,
    fires,
    job_out,
    log_out,
    run_out,
    team_stats_out,
)
from tickwheel.gateway.problems import ProblemError, forbidden, not_found, validation
from tickwheel.projections.readmodel import JobFilter, ReadModel
from tickwheel.projections.views import CommandAnswer, JobView, KeyClaim, RunView, audit_detail
from tickwheel.schemas.model import (
    AuditRecord,
    CancelJob,
    Command,
    CommandMeta,
    CreateJob,
    DeleteJob,
    JobSpec,
    PauseJob,
    ResumeJob,
    Schedule,
    TriggerJob,
    UpdateJob,
    command_id_for,
    manual_run_id_for,
)
from tickwheel.streams import schedule as sched

log = logging.getLogger(__name__)

_ID = re.compile(JOB_ID_PATTERN)
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as the IETF idempotency draft allows
_ETAG = re.compile(r'^(?:W/)?"?([0-9]{1,10})"?$')
MAX_VERSION = 2**31 - 1


# ---------------------------------------------------------------------------
# Inputs beyond the models: path ids and headers


def path_id(call: Call, name: str) -> str:
    value = call.path(name)
    if not _ID.fullmatch(value):
        raise validation(name, "must be letters, digits and . _ : - (at most 128)", 400)
    return value


def _single_header(call: Call, name: str) -> str | None:
    values = call.request.headers.getall(name, [])
    if len(values) > 1:
        raise validation(name, "must be given once", 400)
    return values[0] if values else None


def idempotency_key(call: Call, *, required: bool) -> str | None:
    key = _single_header(call, "Idempotency-Key")
    if key is None:
        if required:
            raise validation("Idempotency-Key", "required on every POST (retries reuse it)", 400)
        return None
    if not _KEY.fullmatch(key):
        raise validation("Idempotency-Key", "must be 1-255 visible ASCII characters", 400)
    return key


def if_match(call: Call) -> int:
    value = _single_header(call, "If-Match")
    if value is None:
        raise ProblemError(
            428, "precondition-required", "send If-Match: <version> of the job you read", field="If-Match"
        )
    found = _ETAG.fullmatch(value.strip())
    if found is None or not 1 <= int(found.group(1)) <= MAX_VERSION:
        raise validation("If-Match", 'must be the job version, e.g. "3"', 400)
    return int(found.group(1))


def _fingerprint(call: Call, payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(f"{call.request.method} {call.request.path}\n{text}".encode()).hexdigest()


def _schedule_problem(schedule: Schedule, min_interval_ms: int) -> None:
    try:
        sched.validate(schedule, min_interval_ms=min_interval_ms)
    except sched.ScheduleError as err:
        raise validation(f"schedule.{err.field}", err.message) from None


def derived_job_id(command_id: str) -> str:
    """A server-generated job id: stable for a command id, so a retried create names one job."""
    return "j-" + hashlib.sha256(f"job\x00{command_id}".encode()).hexdigest()[:24]


# ---------------------------------------------------------------------------
# Authorization


async def _job(call: Call, job_id: str) -> JobView | None:
    return await call.gateway.reads.call(lambda m: m.job(job_id))


async def visible_job(call: Call, job_id: str) -> JobView:
    job = await _job(call, job_id)
    if job is None or not call.who().can_read(job.team):
        raise not_found(f"job {job_id!r}", "job_id")
    return job


async def writable_job(call: Call, job_id: str) -> JobView:
    job = await visible_job(call, job_id)
    _require_write(call.who(), job.team)
    return job


def _require_write(who: Principal, team: str) -> None:
    if not who.can_write(team):
        raise forbidden(f"{who.role.value} {who.name!r} of team {who.team!r} cannot change team {team!r}")


async def visible_run(call: Call, run_id: str) -> RunView:
    def lookup(model: ReadModel) -> tuple[RunView | None, str]:
        run = model.run(run_id)
        if run is None:
            return None, ""
        job = model.job(run.job_id) if not run.team else None
        return run, run.team or (job.team if job is not None else "")

    run, team = await call.gateway.reads.call(lookup)
    if run is None or not team or not call.who().can_read(team):
        raise not_found(f"run {run_id!r}", "run_id")
    return run


def _team_scope(call: Call, team: str | None) -> str | None:
    """The team a listing covers: the caller's own, or any (None) or a named one for admins."""
    who = call.who()
    if who.role is Role.ADMIN:
        return team
    if team is not None and team != who.team:
        raise forbidden(f"{who.name!r} may only list team {who.team!r}")
    return who.team


# ---------------------------------------------------------------------------
# Commands


def _meta(call: Call, job_id: str, key: str) -> CommandMeta:
    who = call.who()
    return CommandMeta(
        command_id=command_id_for(key, who.name),
        job_id=job_id,
        issued_at_ms=call.gateway.clock.wall_ms(),
        principal=who.name,
        request_id=call.request_id,
    )


async def _submit(call: Call, command: Command, action: str, team: str, detail: str) -> None:
    gateway, meta = call.gateway, command.meta
    audit = AuditRecord(
        principal=meta.principal,
        team=team,
        request_id=call.request_id,
        command_id=meta.command_id,
        action=action,
        job_id=meta.job_id,
        at_ms=gateway.clock.wall_ms(),
        detail=detail,
    )
    try:
        await gateway.sink.submit(command, audit)
    except Exception as exc:  # noqa: BLE001 - any append failure is the same answer: retry
        log.warning("command append failed: %s", exc, extra={"job_id": meta.job_id})
        raise ProblemError(
            503,
            "unavailable",
            "the command log is unreachable; retry with the same Idempotency-Key",
            headers={"Retry-After": "1"},
        ) from None
    gateway.metrics.commands.labels(action=action).inc()


async def _answer(call: Call, command_id: str) -> CommandAnswer | None:
    return await call.gateway.reads.call(lambda m: m.answer(command_id))


# The change an accepted answer records per action (JobAccepted: "created" at version 1, else
# "updated"; JobChanged: its change). An answer with another action's change is not ours.
_CHANGE_OF_ACTION = {
    "create": "created",
    "update": "updated",
    "pause": "paused",
    "resume": "resumed",
    "cancel": "cancelled",
    "delete": "deleted",
    "trigger": "triggered",
}
_ACTION_OF_CHANGE = {change: action for action, change in _CHANGE_OF_ACTION.items()}


@dataclass(frozen=True, slots=True)
class Keyed:
    """A mutation's idempotency facts: its request fingerprint, whether it is a retry, and the
    answer to its command found while checking (None: not answered yet)."""

    fingerprint: str
    retry: bool
    answer: CommandAnswer | None


def _reused() -> ProblemError:
    return ProblemError(
        422,
        "idempotency-key-reused",
        "this Idempotency-Key was used for a different request",
        field="Idempotency-Key",
    )


async def _check_key(call: Call, key: str, payload: Any, meta: CommandMeta, action: str) -> Keyed:
    """Refuse a key used before for another request (on any gateway); tell a retry apart.

    Step 1: this process's key cache, which knows a key before the fold has its claim.
    Step 2: after a start, wait until the read model knows the claims on the log (the fence).
    Step 3: the read model's claim of the key and the answer to its command id.
    """
    gateway, principal = call.gateway, call.who().name
    fingerprint = _fingerprint(call, payload)
    # Step 1
    local = gateway.keys.check(principal, key, fingerprint)
    if local is False:
        raise _reused()
    try:
        # Step 2
        await _pass_fence(call)
        # Step 3
        command_id = meta.command_id
        claim, answer = await gateway.reads.call(lambda m: (m.claim(command_id), m.answer(command_id)))
        if not belongs(claim, answer, fingerprint, meta.job_id, action):
            raise _reused()
    except ProblemError:
        if local is None:
            gateway.keys.forget(principal, key)  # not this request's key after all, or not yet
        raise
    return Keyed(fingerprint, retry=local is True or claim is not None, answer=answer)


async def _pass_fence(call: Call) -> None:
    config = call.gateway.config
    if not await call.gateway.fence.wait(config.catchup_timeout_ms / 1000, config.answer_poll_ms / 1000):
        raise ProblemError(
            503,
            "unavailable",
            "the gateway is still reading the log's idempotency keys; retry with the same Idempotency-Key",
            headers={"Retry-After": "1"},
        )


def belongs(
    claim: KeyClaim | None, answer: CommandAnswer | None, fingerprint: str, job_id: str, action: str
) -> bool:
    """Whether what the read model holds for a command id is this request's (or nothing yet).

    The claim decides by fingerprint; a claim from before fingerprints were recorded, and the
    answer, by job and action. An answer is checked even after a matching claim: two gateways
    that took one key for two requests at once both appended, and the answer may be the other's.
    """
    if claim is not None:
        if claim.fingerprint and claim.fingerprint != fingerprint:
            return False
        if not claim.fingerprint and (claim.job_id, claim.action) != (job_id, action):
            return False
    if answer is None:
        return True
    return answer.job_id == job_id and _ACTION_OF_CHANGE.get(answer.change, action) == action


async def _command(
    call: Call,
    command: Command,
    action: str,
    team: str,
    keyed: Keyed,
    *,
    created: bool = False,
    run_id: str | None = None,
    detail: str = "",
) -> Reply:
    """Append ``command`` unless already answered, then answer the request."""
    meta = command.meta
    if keyed.answer is None:
        await _submit(call, command, action, team, audit_detail(detail, keyed.fingerprint))
    return await _reply(call, meta.command_id, meta.job_id, created=created, run_id=run_id)


async def _reply(call: Call, command_id: str, job_id: str, *, created: bool, run_id: str | None) -> Reply:
    gateway = call.gateway
    wait: WaitQuery = call.query
    answer = await _answer(call, command_id)
    if answer is None and wait.wait == "committed":
        timeout_ms = gateway.config.wait_timeout_ms if wait.timeout_ms is None else wait.timeout_ms
        answer = await gateway.waiter.wait(command_id, timeout_ms / 1000)
    if answer is None or wait.wait is None:
        body = command_out(command_id, job_id, answer, run_id=run_id)
        return Reply(202, body, headers={"Location": f"/v1/commands/{command_id}"})
    if answer.outcome == "rejected":
        raise rejection(answer)
    job = await _job(call, job_id)
    shown = job_out(job, gateway.clock.wall_ms()) if job is not None else None
    return Reply(201 if created else 200, command_out(command_id, job_id, answer, run_id=run_id, job=shown))


def api_field(field: str) -> str:
    """A processor field name in the API's spelling (``spec.schedule.expr`` -> ``schedule.expr``)."""
    if field == "expected_version":
        return "If-Match"
    return field.removeprefix("spec.")


def rejection(answer: CommandAnswer) -> ProblemError:
    """The problem for a processor rejection."""
    field, reason = api_field(answer.field), answer.reason
    detail = f"rejected by the scheduler: {reason} (command {answer.command_id})"
    if reason == "version_conflict":
        return ProblemError(412, "precondition-failed", detail, field=field)
    if reason == "not_found":
        return ProblemError(404, "not-found", detail, field=field)
    if reason.startswith("invalid") or reason == "team_immutable":
        return validation(field, detail)
    return ProblemError(409, "conflict", detail, field=field)


# ---------------------------------------------------------------------------
# Jobs


async def create_job(call: Call) -> Reply:
    body: JobCreateIn = call.body
    gateway, who = call.gateway, call.who()
    _require_write(who, body.team)
    key = idempotency_key(call, required=True)
    assert key is not None
    spec = spec_from_api(body)
    _schedule_problem(spec.schedule, gateway.settings.min_interval_ms)
    job_id = body.job_id or derived_job_id(command_id_for(key, who.name))
    command = CreateJob(_meta(call, job_id, key), spec)
    keyed = await _check_key(call, key, body.model_dump(mode="json"), command.meta, "create")
    if not keyed.retry:
        await _admit(call, body.team, key)
    return await _command(call, command, "create", body.team, keyed, created=True, detail=spec.name)


async def _admit(call: Call, team: str, key: str) -> None:
    """Per-team quota and create rate, for new requests only (a retry was admitted already)."""
    gateway = call.gateway
    live = await gateway.reads.call(lambda m: m.live_jobs(team))
    problem: ProblemError | None = None
    if live >= gateway.config.max_jobs_per_team:
        gateway.metrics.rate_limited.labels(limit="jobs_per_team").inc()
        problem = ProblemError(
            403,
            "quota-exceeded",
            f"team {team!r} has {live} live jobs; the limit is {gateway.config.max_jobs_per_team}",
            field="team",
        )
    else:
        wait_s = gateway.limiter.take(team, gateway.clock.monotonic())
        if wait_s:
            gateway.metrics.rate_limited.labels(limit="create_rate").inc()
            problem = ProblemError(
                429,
                "rate-limited",
                f"team {team!r} creates jobs too fast",
                headers={"Retry-After": str(wait_s)},
            )
    if problem is not None:
        gateway.keys.forget(call.who().name, key)  # the same key may be retried later
        raise problem


async def list_jobs(call: Call) -> Reply:
    q = call.query
    team = _team_scope(call, q.team)
    where = JobFilter(
        team=team,
        status=q.state.value if q.state else None,
        pool=q.pool,
        name_prefix=q.name_prefix,
        exclude_status=frozenset() if q.state else frozenset({"deleted"}),
    )
    page = await call.gateway.reads.call(lambda m: m.jobs(where, q.cursor, q.limit))
    return Reply(model=JobPage(items=[job_out(j) for j in page.items], next_cursor=page.next_cursor))


async def get_job(call: Call) -> Reply:
    job = await visible_job(call, path_id(call, "job_id"))
    return Reply(model=job_out(job, call.gateway.clock.wall_ms()), headers={"ETag": f'"{job.version}"'})


async def update_job(call: Call) -> Reply:
    body: JobSpecIn = call.body
    job_id = path_id(call, "job_id")
    expected = if_match(call)
    job = await writable_job(call, job_id)
    if body.team != job.team:
        raise validation("team", "a job's team cannot change")
    spec: JobSpec = spec_from_api(body)
    _schedule_problem(spec.schedule, call.gateway.settings.min_interval_ms)
    if job.version > expected:
        raise ProblemError(
            412, "precondition-failed", f"job {job_id!r} is at version {job.version}", field="If-Match"
        )
    payload = body.model_dump(mode="json")
    key = idempotency_key(call, required=False) or f"update:{job_id}:{expected}:{_fingerprint(call, payload)}"
    command = UpdateJob(_meta(call, job_id, key), spec, expected)
    keyed = await _check_key(call, key, {"version": expected, "spec": payload}, command.meta, "update")
    return await _command(call, command, "update", job.team, keyed, detail=f"expected_version={expected}")


async def delete_job(call: Call) -> Reply:
    job_id = path_id(call, "job_id")
    job = await writable_job(call, job_id)
    key = idempotency_key(call, required=False) or f"delete:{job_id}:{job.version}"
    command = DeleteJob(_meta(call, job_id, key))
    keyed = await _check_key(call, key, {"delete": job_id}, command.meta, "delete")
    return await _command(call, command, "delete", job.team, keyed)


async def _action(
    call: Call, action: str, kind: type[PauseJob | ResumeJob | CancelJob | TriggerJob]
) -> Reply:
    job_id = path_id(call, "job_id")
    job = await writable_job(call, job_id)
    key = idempotency_key(call, required=True)
    assert key is not None
    meta = _meta(call, job_id, key)
    keyed = await _check_key(call, key, {action: job_id}, meta, action)
    run_id = manual_run_id_for(meta.command_id) if kind is TriggerJob else None
    return await _command(call, kind(meta), action, job.team, keyed, run_id=run_id)


async def pause_job(call: Call) -> Reply:
    return await _action(call, "pause", PauseJob)


async def resume_job(call: Call) -> Reply:
    return await _action(call, "resume", ResumeJob)


async def cancel_job(call: Call) -> Reply:
    return await _action(call, "cancel", CancelJob)


async def trigger_job(call: Call) -> Reply:
    return await _action(call, "trigger", TriggerJob)


def _preview(
    job_id: str, schedule: Schedule, *, spread_ms: int, jitter_ms: int, after_ms: int, count: int
) -> Reply:
    try:
        found = fires(
            job_id, schedule, spread_ms=spread_ms, jitter_ms=jitter_ms, after_ms=after_ms, count=count
        )
    except sched.ScheduleError as err:
        raise validation(f"schedule.{err.field}", err.message) from None
    except ValueError as err:  # a stored spec another producer wrote that cannot be evaluated
        raise validation("schedule", f"cannot be evaluated: {err}") from None
    return Reply(model=PreviewOut(job_id=job_id, tz_version=sched.tz_version(), fires=found))


async def preview_job(call: Call) -> Reply:
    job = await visible_job(call, path_id(call, "job_id"))
    assert job.spec is not None
    q = call.query
    after = call.gateway.clock.wall_ms() if q.after_ms is None else q.after_ms
    spec = job.spec
    return _preview(
        job.job_id,
        spec.schedule,
        spread_ms=spec.spread_ms,
        jitter_ms=spec.jitter_ms,
        after_ms=after,
        count=q.count,
    )


async def preview_schedule(call: Call) -> Reply:
    q = call.query
    schedule = q.schedule()
    _schedule_problem(schedule, call.gateway.settings.min_interval_ms)
    after = call.gateway.clock.wall_ms() if q.after_ms is None else q.after_ms
    return _preview(
        q.job_id, schedule, spread_ms=q.spread_ms, jitter_ms=q.jitter_ms, after_ms=after, count=q.count
    )


# ---------------------------------------------------------------------------
# Runs, logs, commands


async def list_runs(call: Call) -> Reply:
    job = await visible_job(call, path_id(call, "job_id"))
    q = call.query
    if q.from_ms is not None and q.to_ms is not None and q.from_ms >= q.to_ms:
        raise validation("from_ms", "must be before to_ms", 400)
    page = await call.gateway.reads.call(
        lambda m: m.runs(job.job_id, q.cursor, q.limit, status=q.status, from_ms=q.from_ms, to_ms=q.to_ms)
    )
    return Reply(model=RunPage(items=[run_out(r) for r in page.items], next_cursor=page.next_cursor))


async def get_run(call: Call) -> Reply:
    return Reply(model=run_out(await visible_run(call, path_id(call, "run_id"))))


async def get_logs(call: Call) -> Reply:
    run = await visible_run(call, path_id(call, "run_id"))
    q = call.query
    page = await call.gateway.reads.call(lambda m: m.logs(run.run_id, q.cursor, q.limit, q.attempt))
    body = LogPage(
        run_id=run.run_id,
        items=[log_out(x) for x in page.items],
        next_cursor=page.next_cursor,
        dropped=run.log_dropped,
    )
    return Reply(model=body)


async def get_command(call: Call) -> Reply:
    command_id = path_id(call, "command_id")
    answer = await _answer(call, command_id)
    if answer is None:
        raise not_found(f"an answer to command {command_id!r} (not answered yet, or unknown)", "command_id")
    job = await _job(call, answer.job_id)
    # A rejected create has no job; its id (a hash of principal and key) is the caller's own.
    if job is not None and not call.who().can_read(job.team):
        raise not_found(f"command {command_id!r}", "command_id")
    shown = job_out(job) if job is not None else None
    return Reply(model=command_out(command_id, answer.job_id, answer, job=shown))


# ---------------------------------------------------------------------------
# Operations


async def _projection(call: Call) -> ProjectionOut:
    gateway = call.gateway
    behind = await gateway.lag.lag(await gateway.reads.call(lambda m: m.positions()))
    if behind is not None:
        for topic, value in behind.items():
            gateway.metrics.projection_lag.labels(topic=topic).set(value)
    return ProjectionOut(lag=None if behind is None else sum(behind.values()), lag_by_topic=behind or {})


async def get_stats(call: Call) -> Reply:
    team = _team_scope(call, call.query.team)
    if team is None:
        counts = await call.gateway.reads.call(lambda m: m.all_stats())
    else:
        counts = {team: await call.gateway.reads.call(lambda m: m.stats(team))}
    teams = {name: team_stats_out(c) for name, c in sorted(counts.items()) if name}
    return Reply(model=StatsOut(teams=teams, projection=await _projection(call)))


async def list_dead_letters(call: Call) -> Reply:
    q = call.query
    team = _team_scope(call, q.team)
    page = await call.gateway.reads.call(lambda m: m.dead_letters(team, q.cursor, q.limit))
    return Reply(
        model=DeadLetterPage(items=[dead_letter_out(d) for d in page.items], next_cursor=page.next_cursor)
    )


async def whoami(call: Call) -> Reply:
    who = call.who()
    return Reply(model=WhoAmIOut(principal=who.name, team=who.team, role=who.role.value))


async def healthz(call: Call) -> Reply:
    return Reply(model=HealthOut(status="ok", checks={}))


async def readyz(call: Call) -> Reply:
    gateway = call.gateway
    checks: dict[str, CheckOut] = {}
    try:
        await gateway.sink.ping()
        checks["kafka"] = CheckOut(ok=True, detail="commands topic reachable")
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said in the detail
        checks["kafka"] = CheckOut(ok=False, detail=f"{type(exc).__name__}: {exc}"[:300])
    checks["projections"] = await _projection_check(call)
    ok = all(c.ok for c in checks.values())
    return Reply(200 if ok else 503, HealthOut(status="ok" if ok else "unavailable", checks=checks))


async def _projection_check(call: Call) -> CheckOut:
    projection = await _projection(call)
    limit = call.gateway.config.max_ready_lag
    if projection.lag is None:
        return CheckOut(ok=False, detail="projection lag unknown (log unreachable or topics missing)")
    if projection.lag > limit:
        return CheckOut(ok=False, detail=f"projection {projection.lag} records behind (limit {limit})")
    return CheckOut(ok=True, detail=f"projection {projection.lag} records behind")


async def metrics(call: Call) -> Reply:
    await _projection(call)
    return Reply(raw=generate_latest(call.gateway.metrics.registry), media=CONTENT_TYPE_LATEST)


async def openapi(call: Call) -> Reply:
    return Reply(raw=call.request.app[OPENAPI_KEY], media="application/json")


_STATIC_NAME = re.compile(STATIC_NAME_PATTERN)
# The UI's media types by suffix, stated rather than guessed: a guess reads the host's
# mime.types (.js is application/javascript on one machine, text/javascript on the next),
# and the OpenAPI document lists exactly these.
STATIC_MEDIA = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
STATIC_FALLBACK = "application/octet-stream"


async def ui_index(call: Call) -> web.StreamResponse:
    return _static(call, "index.html")


async def ui_file(call: Call) -> web.StreamResponse:
    name = call.path("file")
    if not _STATIC_NAME.fullmatch(name) or ".." in name:
        raise not_found(f"file {name!r}")
    return _static(call, name)


def _static(call: Call, name: str) -> web.StreamResponse:
    path = call.gateway.static_dir / name
    if not path.is_file():
        raise not_found(
            f"UI file {name!r} (the UI is not installed)" if name == "index.html" else f"file {name!r}"
        )
    media = STATIC_MEDIA.get(path.suffix)
    content_type = f"{media}; charset=utf-8" if media else STATIC_FALLBACK
    return web.FileResponse(path, headers={"Content-Type": content_type})


OPENAPI_KEY = web.AppKey("openapi", bytes)
