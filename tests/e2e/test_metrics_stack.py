"""``/metrics`` through the real stack (issue 18, Operations): Daphne and a Celery worker,
both writing to one ``PROMETHEUS_MULTIPROC_DIR``. After a run, Daphne's scrape counts it, its
tokens (counted in the worker), its lock waits (the worker's and Daphne's) and the fan-out of
its events to a websocket (observed in Daphne)."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from .flow import Events
from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(180)
METRICS_TOKEN = "e2e-metrics-token"


def scrape(host: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(
        f"http://{host}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_daphnes_scrape_counts_the_workers_run_and_the_fanout(procs, tmp_path):
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        METRICS_TOKEN=METRICS_TOKEN,
        PROMETHEUS_MULTIPROC_DIR=str(shared),
    )
    alice = User.objects.create_user("alice", password="pw")
    token = Token.objects.create(user=alice).key
    host = procs.daphne(env, tmp_path)
    worker = procs.worker(env, tmp_path)
    try:
        assert httpx.get(f"http://{host}/metrics").status_code == 401
        http = httpx.Client(
            base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
        )
        sid = http.post("/api/sessions/", json={"title": "metrics"}).json()["id"]
        events = Events(host, sid, token)
        started = http.post(
            f"/api/sessions/{sid}/runs/",
            json={"messages": [{"content": "say hello from the worker\nwrite a.txt hi"}]},
        )
        assert started.status_code == 202, started.text
        run = events.wait_for_run_end(started.json()["id"])
        assert run["status"] == "completed", run
        delivered = len(events.events)
        events.close()
        samples = scrape(host)
    except Exception:
        print(procs.logs())
        raise

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("agentplat_runs", status="completed") == 1
    assert value("agentplat_runs", status="running") == 0
    assert ("agentplat_queue_depth", ()) in samples
    # Observed in the worker's process, read from the shared directory by Daphne.
    tokens = sum(v for (name, _), v in samples.items() if name == "agentplat_tokens_total")
    assert tokens > 0 and value("agentplat_model_calls_total", model="scripted") >= 2
    assert value("agentplat_lock_wait_seconds_count", lock="row") >= 2
    assert value("agentplat_lock_wait_seconds_count", lock="busy") >= 1
    # Observed in Daphne: every event the socket received after "subscribed".
    assert delivered >= 5
    assert value("agentplat_event_fanout_seconds_count") >= delivered
    assert value("agentplat_event_fanout_seconds_sum") < 5 * delivered
    # Both processes wrote their own files.
    pids = {p.name.rsplit("_", 1)[-1] for p in shared.glob("*.db")}
    assert str(worker.pid) + ".db" in pids and len(pids) >= 2, pids
    assert "process_cpu_seconds_total" in {name for name, _ in samples}
