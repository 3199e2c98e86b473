"""Prometheus metrics of a worker (its own registry, served by ``tickwheel worker --metrics-port``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

_LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)


@dataclass(frozen=True)
class WorkerMetrics:
    registry: CollectorRegistry
    runs_started: Counter
    runs_succeeded: Counter
    runs_failed: Counter
    runs_timed_out: Counter
    runs_cancelled: Counter
    lease_self_stops: Counter
    leases_not_acked: Counter
    redeliveries_deduped: Counter
    runs_dropped: Counter
    executor_seconds: Histogram
    in_flight: Gauge
    pending: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> WorkerMetrics:
        reg = registry if registry is not None else CollectorRegistry()

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(f"tickwheel_worker_{name}", doc, ["pool", *labels], registry=reg)

        return cls(
            registry=reg,
            runs_started=counter("runs_started", "Attempts whose lease (RunStarted) was acknowledged"),
            runs_succeeded=counter("runs_succeeded", "RunSucceeded reported"),
            runs_failed=counter("runs_failed", "RunFailed reported", "retryable"),
            runs_timed_out=counter("runs_timed_out", "RunTimedOut reported"),
            runs_cancelled=counter("runs_cancelled", "Executions stopped by a RunCancelled"),
            lease_self_stops=counter(
                "lease_self_stops", "Executions stopped by the worker because it could not renew the lease"
            ),
            leases_not_acked=counter(
                "leases_not_acked", "RunStarted not acknowledged: the run was not started"
            ),
            redeliveries_deduped=counter(
                "redeliveries_deduped",
                "RunDue records ignored because the attempt was already held or started",
            ),
            runs_dropped=counter("runs_dropped", "RunDue not started", "reason"),
            executor_seconds=Histogram(
                "tickwheel_worker_executor_seconds",
                "Executor wall time per attempt",
                ["pool", "kind"],
                buckets=_LATENCY_BUCKETS,
                registry=reg,
            ),
            in_flight=Gauge("tickwheel_worker_in_flight", "Executions running now", ["pool"], registry=reg),
            pending=Gauge(
                "tickwheel_worker_pending",
                "RunDue held for not_before or waiting for a slot",
                ["pool"],
                registry=reg,
            ),
        )


class LabelCache:
    """Children of labelled metrics, resolved once per label values.

    ``labels()`` takes a lock and builds its key on every call; a run asks for four or five
    children, thousands of times a second at a hot instant.
    """

    def __init__(self) -> None:
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}

    def __call__(self, metric: MetricWrapperBase, *values: str) -> Any:
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child
