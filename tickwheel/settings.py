"""One frozen settings object per process, read from ``TICKWHEEL_*`` environment variables."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Process configuration. Every field reads ``TICKWHEEL_<FIELD>`` from the environment."""

    model_config = SettingsConfigDict(env_prefix="TICKWHEEL_", frozen=True, extra="ignore")

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "tickwheel."
    partitions: int = Field(default=12, ge=1, le=10_000)
    home: Path = Path(".tickwheel")
    app_id: str = "tickwheel"
    # Broker launcher
    broker_port: int = 9092
    controller_port: int = 9093
    broker_heap: str = "1g"
    # Scheduler processor
    lookahead_ms: int = Field(default=2_000, ge=0)
    tick_ms: int = Field(default=100, ge=5)
    misfire_tolerance_ms: int = Field(default=60_000, ge=0)
    start_timeout_ms: int = Field(default=300_000, ge=1_000)
    max_fires_per_step: int = Field(default=5_000, ge=1)
    catchup_budget_per_step: int = Field(default=500, ge=1)
    min_interval_ms: int = Field(default=1_000, ge=0)
    state_cache_size: int = Field(default=100_000, ge=0)
    # Job states an idle tick decodes ahead of their FIRE timers (0: never); see processor.py.
    state_warm_batch: int = Field(default=256, ge=0)
    transaction_timeout_ms: int = Field(default=60_000, ge=1_000)
    # Static group membership (KIP-345): a processor restarted with the same id takes its
    # partitions back at once instead of waiting out the old member's session. Empty: off.
    processor_instance_id: str = ""
    # Gateway
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    token: SecretStr | None = None
    tokens_file: Path | None = None
    # `tickwheel up`: metrics of processor, worker, projections on base, base+1, base+2
    metrics_port_base: int = 9400
    # Where /metrics listens; 0.0.0.0 in the compose cluster so Prometheus can scrape.
    metrics_host: str = "127.0.0.1"
    echo_port: int = 8099
    # Failpoints, e.g. "after_produce_before_commit=kill"; inert when empty
    failpoints: str = ""

    @cached_property
    def state_dir(self) -> Path:
        return self.home / "state"

    def topic(self, name: str) -> str:
        """The full topic name for a logical name such as ``"commands"``."""
        return f"{self.topic_prefix}{name}"


def load() -> Settings:
    """Read the settings from the environment."""
    return Settings()
