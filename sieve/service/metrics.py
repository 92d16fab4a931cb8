"""Prometheus metrics of ``sieve serve`` (``GET /metrics``, text exposition format): requests by
route/method/status, a latency histogram by route, documents inspected and removed by defense, and
the admission outcomes of the work routes (shed, dropped unrun, cancelled while running)."""
from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """One registry per app (several apps in one process, e.g. tests, do not share counters)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("sieve_requests", "HTTP requests answered", ["route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("sieve_request_seconds", "Request latency in seconds", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.documents = Counter("sieve_documents", "Documents inspected by /v1/filter", ["defense"],
                                 registry=self.registry)
        self.removals = Counter("sieve_removals", "Documents removed by /v1/filter (quarantined ones included)",
                                ["defense"], registry=self.registry)
        self.admissions = Counter("sieve_admission", "Work requests not answered by their route: shed (503 + "
                                  "Retry-After: queue full, or its deadline), dropped (client gone while queued, "
                                  "never run), cancelled (stopped at a safe point while running)", ["outcome"],
                                  registry=self.registry)
        for outcome in ("shed", "dropped", "cancelled"):
            self.admissions.labels(outcome)

    def admission(self, outcome: str) -> None:
        self.admissions.labels(outcome).inc()

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def filtered(self, defense: str, documents: int, removed: int) -> None:
        self.documents.labels(defense).inc(documents)
        self.removals.labels(defense).inc(removed)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """ASGI middleware timing every HTTP request under its route template (not the raw path)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(path, scope.get("method", ""), status["code"], time.perf_counter() - t0)
