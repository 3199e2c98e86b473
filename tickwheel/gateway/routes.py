"""The route table: every endpoint of the gateway, served by ``app.py``, documented by ``openapi.py``.

JSON API for the CLI and the web UI (all under ``/v1``, bearer token required)::

    POST   /v1/jobs                      create (Idempotency-Key; ?wait=committed)
    GET    /v1/jobs                      list: team, state, pool, name_prefix, limit, cursor
    GET    /v1/jobs/{job_id}             detail with next fires; ETag = version
    PUT    /v1/jobs/{job_id}             replace the spec (If-Match: version)
    DELETE /v1/jobs/{job_id}             cancel and forget
    POST   /v1/jobs/{job_id}/pause|resume|cancel|trigger   (Idempotency-Key; ?wait=committed)
    GET    /v1/jobs/{job_id}/preview     next N fires with DST flags and spread
    GET    /v1/jobs/{job_id}/runs        history: status, from_ms, to_ms, limit, cursor
    GET    /v1/runs/{run_id}             run with every attempt
    GET    /v1/runs/{run_id}/logs        paged log chunks
    GET    /v1/commands/{command_id}     the processor's answer to a command
    GET    /v1/preview                   fires of an unsaved schedule (expr or at_ms)
    GET    /v1/stats                     per-team counts, lag, failures; projection lag
    GET    /v1/dead-letters              dead letters of visible jobs
    GET    /v1/whoami                    the token's principal, team and role

Unauthenticated: ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``, ``/ui``.
Errors are ``application/problem+json`` (RFC 9457) with ``field`` naming the input at fault.
"""

from __future__ import annotations

from tickwheel.gateway import handlers as h
from tickwheel.gateway.context import Handler, Header, Route
from tickwheel.gateway.models import (
    CommandOut,
    DeadLetterPage,
    DeadLetterQuery,
    HealthOut,
    JobCreateIn,
    JobListQuery,
    JobOut,
    JobPage,
    JobSpecIn,
    LogPage,
    LogQuery,
    PreviewOut,
    PreviewQuery,
    RunListQuery,
    RunOut,
    RunPage,
    SchedulePreviewQuery,
    StatsOut,
    StatsQuery,
    WaitQuery,
    WhoAmIOut,
)

IDEMPOTENCY_KEY = Header(
    "Idempotency-Key",
    "Client-chosen key of this request, unique per caller: a retry with the same key and the same"
    " request appends the same command and gets the original outcome. The key stays bound to its"
    " first request for at least 24 hours (in practice as long as the audit log, which is kept),"
    " whichever gateway answers and across gateway restarts: the same key with another body, path"
    " or job is refused with 422 idempotency-key-reused. Use a new key for every new request."
    " Shortly after a gateway starts, a mutation may wait until the gateway has read the keys"
    " already on the log, or get 503 with Retry-After; retry it with the same key.",
    required=True,
    pattern=r"^[\x21-\x7e]{1,255}$",
)
IDEMPOTENCY_KEY_OPTIONAL = Header(
    IDEMPOTENCY_KEY.name,
    "Optional here: derived from the job version (and for PUT the body) when absent. When given,"
    " bound to its first request as on POST: reused for another request it is refused with 422.",
    pattern=IDEMPOTENCY_KEY.pattern,
)
IF_MATCH = Header(
    "If-Match",
    'The version of the job the change is based on, e.g. "3"',
    required=True,
    # The versions the handler accepts (1 to 2**31-1, quoted or not); documented up to 9 digits,
    # a range no job reaches, so that every value matching the pattern is a version.
    pattern=r'^(?:W/)?"?[1-9][0-9]{0,8}"?$',
)

_READ = (400, 401, 404)
_MUTATION = (400, 401, 403, 404, 409, 412, 413, 415, 422, 429, 503)
_COMMAND_OTHERS = ((202, CommandOut, "Appended; not answered yet (or no wait asked)"),)


def _action(verb: str, handler: Handler, summary: str) -> Route:
    return Route(
        "POST",
        f"/v1/jobs/{{job_id}}/{verb}",
        f"{verb}_job",
        summary,
        handler,
        "jobs",
        response=CommandOut,
        query=WaitQuery,
        headers=(IDEMPOTENCY_KEY,),
        others=_COMMAND_OTHERS,
        problems=_MUTATION,
    )


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v1/jobs",
        "create_job",
        "Create a job",
        h.create_job,
        "jobs",
        ok=201,
        response=CommandOut,
        query=WaitQuery,
        body=JobCreateIn,
        headers=(IDEMPOTENCY_KEY,),
        others=_COMMAND_OTHERS,
        problems=_MUTATION,
    ),
    Route(
        "GET",
        "/v1/jobs",
        "list_jobs",
        "List jobs",
        h.list_jobs,
        "jobs",
        response=JobPage,
        query=JobListQuery,
        problems=(400, 401, 403),
    ),
    Route(
        "GET",
        "/v1/jobs/{job_id}",
        "get_job",
        "A job with its next fires",
        h.get_job,
        "jobs",
        response=JobOut,
        problems=_READ,
    ),
    Route(
        "PUT",
        "/v1/jobs/{job_id}",
        "update_job",
        "Replace a job's spec in place",
        h.update_job,
        "jobs",
        response=CommandOut,
        query=WaitQuery,
        body=JobSpecIn,
        headers=(IF_MATCH, IDEMPOTENCY_KEY_OPTIONAL),
        others=_COMMAND_OTHERS,
        problems=(*_MUTATION, 428),
    ),
    Route(
        "DELETE",
        "/v1/jobs/{job_id}",
        "delete_job",
        "Cancel and forget a job",
        h.delete_job,
        "jobs",
        response=CommandOut,
        query=WaitQuery,
        headers=(IDEMPOTENCY_KEY_OPTIONAL,),
        others=_COMMAND_OTHERS,
        problems=_MUTATION,
    ),
    _action("pause", h.pause_job, "Pause a job"),
    _action("resume", h.resume_job, "Resume a paused job"),
    _action("cancel", h.cancel_job, "Cancel a job and its in-flight runs"),
    _action("trigger", h.trigger_job, "Run a job now"),
    Route(
        "GET",
        "/v1/jobs/{job_id}/preview",
        "preview_job",
        "Next fires of a job",
        h.preview_job,
        "jobs",
        response=PreviewOut,
        query=PreviewQuery,
        problems=(*_READ, 422),
    ),
    Route(
        "GET",
        "/v1/jobs/{job_id}/runs",
        "list_runs",
        "A job's run history, newest first",
        h.list_runs,
        "runs",
        response=RunPage,
        query=RunListQuery,
        problems=_READ,
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}",
        "get_run",
        "A run with every attempt",
        h.get_run,
        "runs",
        response=RunOut,
        problems=_READ,
    ),
    Route(
        "GET",
        "/v1/runs/{run_id}/logs",
        "get_logs",
        "A run's logs, paged",
        h.get_logs,
        "runs",
        response=LogPage,
        query=LogQuery,
        problems=_READ,
    ),
    Route(
        "GET",
        "/v1/commands/{command_id}",
        "get_command",
        "The answer to a command",
        h.get_command,
        "jobs",
        response=CommandOut,
        problems=_READ,
    ),
    Route(
        "GET",
        "/v1/preview",
        "preview_schedule",
        "Next fires of an unsaved schedule",
        h.preview_schedule,
        "jobs",
        response=PreviewOut,
        query=SchedulePreviewQuery,
        problems=(400, 401, 422),
    ),
    Route(
        "GET",
        "/v1/stats",
        "get_stats",
        "Per-team counts, lag and failure statistics",
        h.get_stats,
        "operations",
        response=StatsOut,
        query=StatsQuery,
        problems=(400, 401, 403),
    ),
    Route(
        "GET",
        "/v1/dead-letters",
        "list_dead_letters",
        "Dead letters, newest first",
        h.list_dead_letters,
        "operations",
        response=DeadLetterPage,
        query=DeadLetterQuery,
        problems=(400, 401, 403),
    ),
    Route(
        "GET",
        "/v1/whoami",
        "whoami",
        "The caller's principal, team and role",
        h.whoami,
        "operations",
        response=WhoAmIOut,
        problems=(401,),
    ),
    Route("GET", "/healthz", "healthz", "Liveness", h.healthz, "operations", response=HealthOut, auth=False),
    Route(
        "GET",
        "/readyz",
        "readyz",
        "Readiness: Kafka and projections",
        h.readyz,
        "operations",
        response=HealthOut,
        auth=False,
        others=((503, HealthOut, "Not ready"),),
    ),
    Route(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics",
        h.metrics,
        "operations",
        media="text/plain",
        auth=False,
    ),
    Route("GET", "/openapi.json", "openapi", "This document", h.openapi, "operations", auth=False),
    Route(
        "GET",
        "/ui",
        "ui_index",
        "The web UI",
        h.ui_index,
        "ui",
        media=h.STATIC_MEDIA[".html"],
        auth=False,
        problems=(404,),
    ),
    Route(
        "GET",
        "/ui/{file}",
        "ui_file",
        "A file of the web UI",
        h.ui_file,
        "ui",
        media=h.STATIC_FALLBACK,
        more_media=tuple(h.STATIC_MEDIA.values()),
        auth=False,
        problems=(404,),
    ),
)
