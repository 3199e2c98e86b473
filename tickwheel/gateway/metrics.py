"""Prometheus metrics of the gateway."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True)
class GatewayMetrics:
    registry: CollectorRegistry
    request_seconds: Histogram
    commands: Counter
    rate_limited: Counter
    projection_lag: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> GatewayMetrics:
        reg = registry if registry is not None else CollectorRegistry()
        return cls(
            registry=reg,
            request_seconds=Histogram(
                "tickwheel_http_request_seconds",
                "HTTP request latency by route",
                ["method", "route", "status"],
                buckets=_LATENCY_BUCKETS,
                registry=reg,
            ),
            commands=Counter(
                "tickwheel_gateway_commands", "Commands appended by the gateway", ["action"], registry=reg
            ),
            rate_limited=Counter(
                "tickwheel_gateway_rate_limited",
                "Requests refused by a per-team limit",
                ["limit"],
                registry=reg,
            ),
            projection_lag=Gauge(
                "tickwheel_projection_lag_records",
                "Records on the log not yet folded into the read model the gateway serves from",
                ["topic"],
                registry=reg,
            ),
        )
