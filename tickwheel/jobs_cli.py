"""``tickwheel jobs ...``: the job CLI, a client of the gateway's JSON API.

The gateway is ``TICKWHEEL_GATEWAY_URL`` (default http://127.0.0.1:8080), the token
``TICKWHEEL_TOKEN``. Tables for people, ``--json`` for machines (the API's own JSON).
Changes wait for the scheduler's answer (``?wait=committed``) unless ``--no-wait``.

Each change carries an ``Idempotency-Key`` (``--idempotency-key``, else a fresh one per
invocation) and is retried with that same key when the gateway is unreachable or answers
503, so a retry never acts twice.

Exit codes: 0 done; 1 the gateway refused or failed (its problem detail on one stderr line);
2 bad command-line input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
RETRIES = 3
RETRY_PAUSE_S = 0.5


def _cli_error(message: str, code: int) -> Exception:
    from tickwheel.cli import CliError

    return CliError(message, code)


# ---------------------------------------------------------------------------
# HTTP


@dataclass(frozen=True)
class Gateway:
    """The gateway's base URL and the caller's token."""

    url: str
    token: str
    timeout_s: float = 30.0

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One API call; retried with the same headers while the gateway is unreachable or 503."""
        for attempt in range(1, RETRIES + 1):
            try:
                return self._once(method, path, query, body, headers or {})
            except _RetryableError as exc:
                if attempt == RETRIES:
                    raise _cli_error(str(exc), 1) from None
                time.sleep(RETRY_PAUSE_S * attempt)
        raise AssertionError("unreachable")

    def _once(
        self, method: str, path: str, query: dict[str, Any] | None, body: Any, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.url.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - scheme checked in _gateway
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - as above
                return response.status, dict(response.headers), _decode(response.read())
        except urllib.error.HTTPError as error:
            payload = _decode(error.read())
            if error.code == 503:
                raise _RetryableError(_problem_line(error.code, payload)) from None
            raise _cli_error(_problem_line(error.code, payload), 1) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise _RetryableError(f"cannot reach the gateway at {self.url}: {reason}") from None


class _RetryableError(Exception):
    pass


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _problem_line(status: int, payload: Any) -> str:
    if isinstance(payload, dict):
        detail = payload.get("detail") or payload.get("title") or ""
        where = f" (field {payload['field']})" if payload.get("field") else ""
        return f"{status} {payload.get('title', '')}: {detail}{where}".replace("\n", " ")
    return f"{status}: {str(payload)[:200]}".replace("\n", " ")


# ---------------------------------------------------------------------------
# Output


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _schedule_text(schedule: dict[str, Any]) -> str:
    if schedule.get("kind") == "once":
        return f"once {_iso(schedule.get('at_ms'))}"
    return f"{schedule.get('expr')} {schedule.get('tz')}"


def _show_job(job: dict[str, Any]) -> str:
    spec = job["spec"]
    lines = [
        f"job       {job['job_id']}",
        f"team      {spec['team']}",
        f"name      {spec['name']}",
        f"status    {job['status']} (version {job['version']}, last change {job['last_change'] or '-'})",
        f"schedule  {_schedule_text(spec['schedule'])}",
        f"executor  {spec['executor']['kind']} pool {spec['pool']}",
        f"latest    {job.get('latest_run_id') or '-'}",
    ]
    fires = job.get("next_fires") or []
    if fires:
        lines.append("next fires:")
        lines += [
            f"  {_iso(f['fire_at_ms'])}  {f['local_iso']}  {' '.join(f['flags'])}".rstrip() for f in fires
        ]
    return "\n".join(lines)


def _show_command(body: dict[str, Any], action: str) -> str:
    state = body["state"]
    if state == "pending":
        return f"{action}: command {body['command_id']} for job {body['job_id']} appended; no answer yet"
    answer = body.get("answer") or {}
    extra = f", run {body['run_id']}" if body.get("run_id") else ""
    status = f" status {answer.get('status')}" if answer.get("status") else ""
    return f"{action}: job {body['job_id']} {state} (version {answer.get('version')}{status}{extra})"


# ---------------------------------------------------------------------------
# Spec from flags


def _at_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _cli_error(f"--at {text!r}: not epoch ms or an ISO 8601 time", 2) from None
    if moment.tzinfo is None:
        raise _cli_error(f"--at {text!r}: give an offset (e.g. Z or +01:00)", 2)
    return int(moment.timestamp() * 1000)


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _cli_error(f"--label {pair!r}: expected KEY=VALUE", 2)
        labels[key] = value
    return labels


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _cli_error(f"{what}: not JSON ({exc})", 2) from None


def _file_spec(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError) as exc:
        raise _cli_error(f"--file {path}: {exc}", 2) from None
    if not isinstance(value, dict):
        raise _cli_error(f"--file {path}: must hold a JSON object", 2)
    return value


_FLAG_FIELDS = (
    "team",
    "name",
    "pool",
    "spread_ms",
    "jitter_ms",
    "timeout_ms",
    "lease_ms",
    "overlap",
    "catchup",
)


def spec_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A spec body from ``--file`` or ``base`` overlaid with the flags given."""
    spec = dict(base or {})
    if args.file:
        spec.update(_file_spec(args.file))
    for name in _FLAG_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            spec[name] = value
    if args.cron is not None and args.at is not None:
        raise _cli_error("give --cron or --at, not both", 2)
    if args.cron is not None:
        spec["schedule"] = {"kind": "cron", "expr": args.cron, "tz": args.tz or "UTC"}
    elif args.at is not None:
        spec["schedule"] = {"kind": "once", "at_ms": _at_ms(args.at)}
    elif args.tz is not None and spec.get("schedule", {}).get("kind") == "cron":
        spec["schedule"] = {**spec["schedule"], "tz": args.tz}
    if args.executor is not None or args.config is not None:
        executor = dict(spec.get("executor") or {})
        executor["kind"] = args.executor or executor.get("kind")
        if args.config is not None:
            executor["config"] = _json_arg(args.config, "--config")
        spec["executor"] = executor
    if args.max_attempts is not None:
        spec["retry"] = {**(spec.get("retry") or {}), "max_attempts": args.max_attempts}
    if args.label:
        spec["labels"] = {**(spec.get("labels") or {}), **_labels(args.label)}
    return spec


def _editable(spec: dict[str, Any]) -> dict[str, Any]:
    """A job's shown spec as an update body (the output model's fields are the input's)."""
    return {k: v for k, v in spec.items() if v is not None}


# ---------------------------------------------------------------------------
# Commands


def _wait_query(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.no_wait else {"wait": "committed", "timeout_ms": args.wait_ms}


def _key(args: argparse.Namespace) -> str:
    return str(args.idempotency_key or uuid.uuid4().hex)


def _emit(args: argparse.Namespace, body: Any, human: Callable[[Any], str]) -> int:
    _out(json.dumps(body) if args.json else human(body))
    return 0


def _create(gw: Gateway, args: argparse.Namespace) -> int:
    body = spec_from_args(args)
    if args.job_id:
        body["job_id"] = args.job_id
    for needed in ("team", "name", "schedule", "executor"):
        if needed not in body:
            raise _cli_error(f"create needs {needed} (flag or --file)", 2)
    headers = {"Idempotency-Key": _key(args)}
    _s, _h, answer = gw.request("POST", "/v1/jobs", query=_wait_query(args), body=body, headers=headers)
    return _emit(args, answer, lambda b: _show_command(b, "create"))


def _get(gw: Gateway, args: argparse.Namespace) -> int:
    _s, _h, job = gw.request("GET", f"/v1/jobs/{_quote(args.job_id)}")
    return _emit(args, job, _show_job)


def _list(gw: Gateway, args: argparse.Namespace) -> int:
    query = {
        "team": args.team,
        "state": args.state,
        "pool": args.pool,
        "name_prefix": args.prefix,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    items: list[dict[str, Any]] = []
    while True:
        _s, _h, page = gw.request("GET", "/v1/jobs", query=query)
        items += page["items"]
        if not args.all or not page["next_cursor"]:
            break
        query["cursor"] = page["next_cursor"]
    if args.json:
        _out(json.dumps({"items": items, "next_cursor": None if args.all else page["next_cursor"]}))
        return 0
    rows = [
        (
            j["job_id"],
            j["spec"]["team"],
            j["spec"]["name"],
            j["status"],
            j["version"],
            _schedule_text(j["spec"]["schedule"]),
        )
        for j in items
    ]
    _out(table(rows, ("JOB", "TEAM", "NAME", "STATUS", "VERSION", "SCHEDULE")))
    if not args.all and page["next_cursor"]:
        _out(f"more: --cursor {page['next_cursor']}")
    return 0


def _update(gw: Gateway, args: argparse.Namespace) -> int:
    path = f"/v1/jobs/{_quote(args.job_id)}"
    _s, _h, current = gw.request("GET", path)
    version = args.version if args.version is not None else current["version"]
    body = spec_from_args(args, _editable(current["spec"]))
    headers = {"If-Match": f'"{version}"', "Idempotency-Key": _key(args)}
    _s, _h, answer = gw.request("PUT", path, query=_wait_query(args), body=body, headers=headers)
    return _emit(args, answer, lambda b: _show_command(b, "update"))


def _action(action: str) -> Callable[[Gateway, argparse.Namespace], int]:
    def run(gw: Gateway, args: argparse.Namespace) -> int:
        headers = {"Idempotency-Key": _key(args)}
        path = f"/v1/jobs/{_quote(args.job_id)}"
        if action == "delete":
            _s, _h, answer = gw.request("DELETE", path, query=_wait_query(args), headers=headers)
        else:
            _s, _h, answer = gw.request("POST", f"{path}/{action}", query=_wait_query(args), headers=headers)
        return _emit(args, answer, lambda b: _show_command(b, action))

    return run


def _runs(gw: Gateway, args: argparse.Namespace) -> int:
    query = {"status": args.status, "limit": args.limit, "cursor": args.cursor}
    _s, _h, page = gw.request("GET", f"/v1/jobs/{_quote(args.job_id)}/runs", query=query)
    if args.json:
        return _emit(args, page, str)
    rows = []
    for run in page["items"]:
        last = run["attempts"][-1] if run["attempts"] else {}
        duration = last.get("duration_ms")
        rows.append(
            (
                run["run_id"],
                run["status"],
                _iso(run["scheduled_for_ms"]),
                len(run["attempts"]),
                last.get("worker_id") or "-",
                "-" if duration is None else f"{duration}ms",
            )
        )
    _out(table(rows, ("RUN", "STATUS", "SCHEDULED", "ATTEMPTS", "WORKER", "DURATION")))
    if page["next_cursor"]:
        _out(f"more: --cursor {page['next_cursor']}")
    return 0


def _logs(gw: Gateway, args: argparse.Namespace) -> int:
    query = {"attempt": args.attempt, "limit": args.limit, "cursor": args.cursor}
    lines: list[dict[str, Any]] = []
    while True:
        _s, _h, page = gw.request("GET", f"/v1/runs/{_quote(args.run_id)}/logs", query=query)
        lines += page["items"]
        if not page["next_cursor"] or args.cursor_only:
            break
        query["cursor"] = page["next_cursor"]
    if args.json:
        return _emit(args, {"run_id": args.run_id, "items": lines, "dropped": page["dropped"]}, str)
    sys.stdout.write("".join(line["data"] for line in lines))
    if page["dropped"]:
        sys.stderr.write(f"({page['dropped']} chunks dropped: the run's log bound was reached)\n")
    return 0


def _preview(gw: Gateway, args: argparse.Namespace) -> int:
    if args.job_id and args.cron:
        raise _cli_error("preview a JOB or a --cron expression, not both", 2)
    if args.job_id:
        _s, _h, body = gw.request(
            "GET", f"/v1/jobs/{_quote(args.job_id)}/preview", query={"count": args.count}
        )
    elif args.cron:
        query = {"expr": args.cron, "tz": args.tz or "UTC", "count": args.count}
        _s, _h, body = gw.request("GET", "/v1/preview", query=query)
    else:
        raise _cli_error("preview needs a JOB or --cron EXPR", 2)
    if args.json:
        return _emit(args, body, str)
    rows = [
        (
            _iso(f["at_ms"]),
            f["local_iso"],
            _iso(f["fire_at_ms"]),
            " ".join(f["flags"]) or "-",
            "skipped" if f["skipped"] else "",
        )
        for f in body["fires"]
    ]
    _out(table(rows, ("AT (UTC)", "LOCAL", "FIRES AT (UTC)", "FLAGS", "")))
    _out(f"tz database {body['tz_version']}")
    return 0


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


# ---------------------------------------------------------------------------
# Parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    parser.add_argument(
        "--url", default=None, help=f"gateway URL (default $TICKWHEEL_GATEWAY_URL or {DEFAULT_URL})"
    )


def _change(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the scheduler's answer")
    parser.add_argument("--wait-ms", type=int, default=10_000, help="how long to wait for the answer")
    parser.add_argument("--idempotency-key", default=None, help="reuse to retry a change safely")


def _spec_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", help="JSON file with the job spec (flags override it)")
    parser.add_argument("--team")
    parser.add_argument("--name")
    parser.add_argument("--cron", help="cron expression (5 or 6 fields)")
    parser.add_argument("--tz", help="IANA zone of --cron (default UTC)")
    parser.add_argument("--at", help="one-time: ISO 8601 with offset, or epoch ms")
    parser.add_argument("--executor", help="executor kind, e.g. http or process")
    parser.add_argument("--config", help="executor configuration as a JSON object")
    parser.add_argument("--pool")
    parser.add_argument("--overlap", choices=("allow", "skip", "buffer_one", "buffer_all", "cancel_other"))
    parser.add_argument("--catchup", choices=("skip", "latest", "all"))
    parser.add_argument("--spread-ms", dest="spread_ms", type=int)
    parser.add_argument("--jitter-ms", dest="jitter_ms", type=int)
    parser.add_argument("--timeout-ms", dest="timeout_ms", type=int)
    parser.add_argument("--lease-ms", dest="lease_ms", type=int)
    parser.add_argument("--max-attempts", dest="max_attempts", type=int)
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE (repeatable)")


def register(subparsers: Any) -> None:
    jobs = subparsers.add_parser("jobs", help="create, inspect and change jobs through the gateway")
    sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    _register_changes(sub)
    _register_reads(sub)
    jobs.set_defaults(func=_run)


def _register_changes(sub: Any) -> None:
    create = sub.add_parser("create", help="create a job")
    _spec_flags(create)
    create.add_argument("--job-id", help="choose the id (default: derived from the idempotency key)")
    _change(create)
    create.set_defaults(handler=_create)

    update = sub.add_parser("update", help="change a job's spec in place (flags or --file)")
    update.add_argument("job_id")
    _spec_flags(update)
    update.add_argument("--version", type=int, help="expected version (default: the current one)")
    _change(update)
    update.set_defaults(handler=_update)

    for action in ("pause", "resume", "cancel", "trigger", "delete"):
        parser = sub.add_parser(action, help=f"{action} a job")
        parser.add_argument("job_id")
        _change(parser)
        parser.set_defaults(handler=_action(action))


def _register_reads(sub: Any) -> None:
    get = sub.add_parser("get", help="show a job and its next fires")
    get.add_argument("job_id")
    _common(get)
    get.set_defaults(handler=_get)

    listing = sub.add_parser("list", help="list jobs")
    for flag in ("--team", "--pool", "--prefix", "--cursor"):
        listing.add_argument(flag)
    listing.add_argument("--state", choices=("active", "paused", "completed", "cancelled", "deleted"))
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--all", action="store_true", help="follow cursors to the end")
    _common(listing)
    listing.set_defaults(handler=_list)

    runs = sub.add_parser("runs", help="a job's runs, newest first")
    runs.add_argument("job_id")
    runs.add_argument("--status")
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("--cursor")
    _common(runs)
    runs.set_defaults(handler=_runs)

    logs = sub.add_parser("logs", help="a run's logs")
    logs.add_argument("run_id")
    logs.add_argument("--attempt", type=int)
    logs.add_argument("--limit", type=int, default=500)
    logs.add_argument("--cursor")
    logs.add_argument("--page", dest="cursor_only", action="store_true", help="one page only")
    _common(logs)
    logs.set_defaults(handler=_logs)

    preview = sub.add_parser("preview", help="next fires of a job, or of a --cron expression")
    preview.add_argument("job_id", nargs="?")
    preview.add_argument("--cron")
    preview.add_argument("--tz")
    preview.add_argument("--count", type=int, default=10)
    _common(preview)
    preview.set_defaults(handler=_preview)


def _gateway(args: argparse.Namespace) -> Gateway:
    url = args.url or os.environ.get("TICKWHEEL_GATEWAY_URL") or DEFAULT_URL
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise _cli_error(f"gateway URL {url!r} must be http:// or https://", 2)
    token = os.environ.get("TICKWHEEL_TOKEN", "")
    if not token:
        raise _cli_error("set TICKWHEEL_TOKEN to your API token", 2)
    return Gateway(url, token)


def _run(args: argparse.Namespace) -> int:
    handler: Callable[[Gateway, argparse.Namespace], int] = args.handler
    return handler(_gateway(args), args)
