"""Prometheus metrics of the projector."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass(frozen=True)
class ProjectionMetrics:
    registry: CollectorRegistry
    lag: Gauge
    folded: Counter
    undecodable: Counter
    batch_seconds: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> ProjectionMetrics:
        reg = registry if registry is not None else CollectorRegistry()
        return cls(
            registry=reg,
            lag=Gauge(
                "tickwheel_projection_lag_records",
                "Records on the log not yet folded into the read model (end offset - position)",
                ["topic"],
                registry=reg,
            ),
            folded=Counter("tickwheel_projection_events", "Events folded into the read model", registry=reg),
            undecodable=Counter(
                "tickwheel_projection_undecodable",
                "Records skipped because they did not decode",
                registry=reg,
            ),
            batch_seconds=Histogram(
                "tickwheel_projection_batch_seconds",
                "Time to fold and write one consumed batch",
                registry=reg,
            ),
        )
