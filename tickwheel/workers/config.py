"""Worker settings that ``tickwheel.settings.Settings`` does not hold (yet).

One frozen :class:`WorkerConfig` per worker process, read from ``TICKWHEEL_WORKER_<FIELD>``
environment variables (upper-cased field name; the worker id is ``TICKWHEEL_WORKER_ID``).
The lead merges these into ``Settings`` later; until then the worker takes both objects.

Value formats: integers as decimal text; ``pools``, ``ssrf_allow`` comma-separated;
``team_limits`` a JSON object of team -> limit; ``container_runtime`` a JSON list of strings
(or whitespace-separated words).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "TICKWHEEL_WORKER_"


def default_worker_id() -> str:
    """Host name and pid: unique per live process, readable in outcomes and logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker needs beyond the shared settings."""

    worker_id: str = field(default_factory=default_worker_id)
    pools: tuple[str, ...] = ("default",)
    concurrency: int = 16  # executions in flight in this process, all pools together
    # Per (pool, team) concurrency limit across all workers of the pool; see tenancy.py.
    team_limits: Mapping[str, int] = field(default_factory=dict)
    # Destinations the SSRF guard lets through: host, host:port, IP, IP:port or CIDR.
    ssrf_allow: tuple[str, ...] = ()
    container_runtime: tuple[str, ...] = ("podman", "run", "--rm")
    secrets_file: Path | None = None
    log_limit_bytes: int = 64 * 1024  # captured output kept per run attempt
    log_chunk_bytes: int = 8 * 1024  # size at which a LogChunk is cut and sent
    result_max_bytes: int = 4 * 1024  # RunSucceeded.result and a workflow step's hand-over
    kill_grace_ms: int = 5_000  # SIGTERM -> SIGKILL
    http_timeout_ms: int = 30_000  # default when an http config names no timeout
    http_max_response_bytes: int = 1024 * 1024
    shutdown_grace_ms: int = 10_000  # on stop, how long running executions may finish
    max_pending: int = 1_000  # held + waiting runs per pool before the consumer pauses
    dedupe_capacity: int = 100_000  # (run_id, attempt) pairs remembered as started
    metrics_port: int = 0

    def __post_init__(self) -> None:
        problems = [name for name, ok in self._checks() if not ok]
        if problems:
            raise ValueError(f"invalid worker config: {', '.join(problems)}")

    def _checks(self) -> list[tuple[str, bool]]:
        return [
            ("worker_id must be non-empty", bool(self.worker_id)),
            ("pools must be non-empty", bool(self.pools) and all(self.pools)),
            ("concurrency must be >= 1", self.concurrency >= 1),
            ("team_limits must be >= 1", all(v >= 1 for v in self.team_limits.values())),
            ("container_runtime must be non-empty", bool(self.container_runtime)),
            (
                "log_chunk_bytes must be in 1..log_limit_bytes",
                0 < self.log_chunk_bytes <= self.log_limit_bytes,
            ),
            ("kill_grace_ms must be >= 0", self.kill_grace_ms >= 0),
            ("max_pending must be >= 1", self.max_pending >= 1),
            ("dedupe_capacity must be >= 1", self.dedupe_capacity >= 1),
        ]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorkerConfig:
        """Read ``TICKWHEEL_WORKER_*``; ``overrides`` (e.g. from CLI flags) win over the environment."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(env_var(f.name))
            if raw is not None:
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def env_var(name: str) -> str:
    """The variable for field ``name``: ``TICKWHEEL_WORKER_<NAME>``, but ``TICKWHEEL_WORKER_ID``."""
    return "TICKWHEEL_WORKER_ID" if name == "worker_id" else ENV_PREFIX + name.upper()


def _words(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _team_limits(raw: str) -> dict[str, int]:
    value = json.loads(raw)
    if not isinstance(value, dict) or not all(isinstance(v, int) for v in value.values()):
        raise ValueError('expected a JSON object of team -> integer, e.g. {"team-a": 10}')
    return {str(k): v for k, v in value.items()}


def _argv(raw: str) -> tuple[str, ...]:
    if raw.lstrip().startswith("["):
        value = json.loads(raw)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a JSON list of strings")
        return tuple(value)
    return tuple(raw.split())


_PARSERS: dict[str, Callable[[str], Any]] = {
    "worker_id": str,
    "pools": _words,
    "team_limits": _team_limits,
    "ssrf_allow": _words,
    "container_runtime": _argv,
    "secrets_file": lambda raw: Path(raw) if raw else None,
}


def _parse(name: str, raw: str) -> Any:
    try:
        return _PARSERS.get(name, int)(raw)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError too
        raise ValueError(f"{env_var(name)}: {exc}") from None
