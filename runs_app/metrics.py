"""``GET /metrics``: Prometheus metrics, for a scraper holding ``METRICS_TOKEN``.

* ``METRICS_TOKEN`` unset (the default): 404, as if there were no such page.
* Set: the request must carry ``Authorization: Bearer <METRICS_TOKEN>`` (401 otherwise).

What is read at scrape time, the same whichever process answers and however many workers run:
``agentplat_runs{status}`` (one GROUP BY on the runs) and ``agentplat_queue_depth`` (the
Celery queue's length in the broker; in-process runs: the runs waiting for room in this
process's run host). What processes count as it happens (tokens, event fan-out, lock waits:
``core/metrics.py``) comes from prometheus_client: with ``PROMETHEUS_MULTIPROC_DIR``
the sum over every process of the machine that writes to that directory (Daphne and the
workers), else this process's own. Plus the client's process and platform basics of the
process that answers.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable, Iterator

from celery import current_app
from django.conf import settings
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    REGISTRY,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from core import metrics as instruments

from .execution import runtime
from .execution.host import host
from .models import Run

log = logging.getLogger(__name__)


def runs_by_status() -> dict[str, int]:
    """Every status, with how many runs are in it now (one query)."""
    counts = dict.fromkeys(Run.Status.values, 0)
    rows = Run.objects.order_by().values_list("status").annotate(n=Count("id"))
    counts.update({status: n for status, n in rows})
    return counts


def queue_depth() -> int:
    """Runs handed over for execution that no run host has taken yet: the messages waiting in
    the Celery queue (the broker's count: LLEN of the queue's Redis lists), or, with
    in-process runs, those waiting for room in this process's run host."""
    if runtime.in_process():
        return host.queued
    queue = current_app.conf.task_default_queue
    options = {"max_retries": 1, "socket_timeout": 2, "socket_connect_timeout": 2}
    with current_app.connection_for_read(transport_options=options) as conn:
        # Not passive: the Redis transport finds no queue while it is empty (no list key).
        return conn.default_channel.queue_declare(queue=queue).message_count


class LiveCollector:
    """What is read from the database and the broker at each scrape."""

    def collect(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "agentplat_runs", "Runs in each status now (from the database).", labels=["status"]
        )
        for status, n in runs_by_status().items():
            runs.add_metric([status], n)
        yield runs
        try:
            depth = queue_depth()
        except Exception:  # noqa: BLE001 - a broker that does not answer omits the gauge
            log.warning("metrics: the queue depth could not be read", exc_info=True)
        else:
            yield GaugeMetricFamily(
                "agentplat_queue_depth",
                "Runs waiting for a worker: the Celery queue's length in the broker, or runs "
                "waiting for room in the in-process run host.",
                value=depth,
            )


class _Scrape:
    """The collectors of one exposition (``generate_latest`` needs only ``collect``)."""

    def __init__(self, sources: Iterable[object]) -> None:
        self.sources = list(sources)

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()  # type: ignore[attr-defined]


def exposition() -> bytes:
    if instruments.multiprocess():
        # Every process's values from the directory; this process's basics beside them.
        shared = multiprocess.MultiProcessCollector(None)
        sources: list[object] = [shared, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR]
    else:
        sources = [REGISTRY]
    return generate_latest(_Scrape([*sources, LiveCollector()]))


def _authorized(request: HttpRequest) -> bool:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), settings.METRICS_TOKEN.encode()
    )


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not settings.METRICS_TOKEN:
        raise Http404("No metrics here.")
    if not _authorized(request):
        response = HttpResponse("A bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
