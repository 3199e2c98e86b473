"""The gateway's own settings (``TICKWHEEL_GATEWAY_*``), beside the process-wide Settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewayConfig(BaseSettings):
    """Limits and wiring of the HTTP gateway. Every field reads ``TICKWHEEL_GATEWAY_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="TICKWHEEL_GATEWAY_", frozen=True, extra="ignore")

    # Requests
    max_body_bytes: int = Field(default=64 * 1024, ge=1_024, le=16 << 20)
    # Per-team limits: live (active or paused) jobs, and creates per second with a burst.
    max_jobs_per_team: int = Field(default=100_000, ge=1)
    creates_per_second: float = Field(default=10.0, gt=0)
    create_burst: int = Field(default=100, ge=1)
    # ?wait=committed
    wait_timeout_ms: int = Field(default=5_000, ge=0, le=60_000)
    answer_poll_ms: int = Field(default=25, ge=1, le=5_000)
    # Read model: "embedded" folds in this process; "secondary" reads the store a separate
    # `tickwheel projections` process writes, catching up every refresh_ms.
    read_model: Literal["embedded", "secondary"] = "embedded"
    refresh_ms: int = Field(default=100, ge=10)
    # /readyz fails while the projection is further behind than this many records.
    max_ready_lag: int = Field(default=10_000, ge=0)
    # Remembered idempotency keys (per process) to refuse a reused key with another body
    # before the read model has folded the key's audit record.
    idempotency_cache: int = Field(default=100_000, ge=0)
    # After a start, how long a mutation waits for the read model to fold the audit log and
    # the answers as they stood (so a key used before the restart is known), before a 503.
    catchup_timeout_ms: int = Field(default=5_000, ge=0, le=60_000)
    # JSON list of token entries, like the tokens file (see auth.py).
    tokens: SecretStr | None = None
