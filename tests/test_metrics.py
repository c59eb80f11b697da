"""Prometheus metrics at ``/metrics`` (issue 18, Operations): hidden (404) unless
``METRICS_TOKEN`` is set, then only for its bearer; the text format parses; runs by status,
tokens, event fan-out, queue depth and lock waits reflect what happened."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import sync_to_async
from celery import current_app
from channels.testing import WebsocketCommunicator
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from realtime import events
from runs_app import metrics as scrape
from runs_app.execution.runtime import TASK_NAME
from runs_app.models import Run
from sessions_app.models import Message
from tests.conftest import client_for, new_session, run_turn
from tests.support.waits import subscribed

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "s3cret-metrics-token"
HOST = [(b"host", b"localhost"), (b"origin", b"http://localhost")]


@pytest.fixture
def metrics_token(settings) -> str:
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by (name, sorted labels)."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_without_the_setting_there_is_no_such_page(settings, owner):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404
    staff = Client()
    owner.is_staff = owner.is_superuser = True
    owner.save()
    staff.force_login(owner)
    assert staff.get("/metrics").status_code == 404, "a login does not open it either"


def test_with_the_setting_only_the_bearer_of_the_token_reads(metrics_token, owner):
    anonymous = Client()
    for header in (None, "Bearer wrong", f"Token {TOKEN}", TOKEN, "Bearer ", f"Basic {TOKEN}"):
        extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
        response = anonymous.get("/metrics", **extra)
        assert response.status_code == 401, header
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"agentplat" not in response.content
    # An API token of a user is not the metrics token.
    api_token = Token.objects.create(user=owner).key
    assert anonymous.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {api_token}").status_code == 401
    ok = anonymous.get("/metrics", HTTP_AUTHORIZATION=f"bearer {TOKEN}")
    assert ok.status_code == 200
    names = {f.name for f in text_string_to_metric_families(ok.content.decode())}
    assert {
        "agentplat_runs",
        "agentplat_queue_depth",
        "agentplat_tokens",
        "agentplat_model_calls",
        "agentplat_event_fanout_seconds",
        "agentplat_lock_wait_seconds",
        "process_cpu_seconds",  # the client's process basics
        "python_info",
    } <= names, names


def test_runs_by_status_tokens_and_lock_waits_follow_what_happened(metrics_token, api, sid):
    before = scraped()
    run = run_turn(api, sid, "say hello there\nwrite a.txt hi")
    other = new_session(api)
    Run.objects.create(session_id=other, status=Run.Status.ERROR)
    Run.objects.create(session_id=other, status=Run.Status.PENDING)
    after = scraped()

    # Runs by status: what the database holds now, every status present.
    for status in Run.Status.values:
        n = Run.objects.filter(status=status).count()
        assert value(after, "agentplat_runs", status=status) == n, status
    assert value(after, "agentplat_runs", status="completed") == 1
    assert value(after, "agentplat_runs", status="error") == 1
    assert value(after, "agentplat_runs", status="pending") == 1
    assert value(after, "agentplat_runs", status="running") == 0

    # Tokens: the run's recorded usage, as its assistant messages' usage sums it, by model.
    model = Run.objects.get(id=run["id"]).model or "scripted"
    recorded = {"input_tokens": 0, "output_tokens": 0, "calls": 0}
    for tokens in Message.objects.filter(session_id=sid, role="assistant").values_list(
        "tokens", flat=True
    ):
        for key in ("input_tokens", "output_tokens"):
            recorded[key] += int((tokens or {}).get(key) or 0)
        recorded["calls"] += 1 if tokens else 0
    assert recorded["output_tokens"] > 0 and recorded["calls"] >= 2
    usage = Run.objects.get(id=run["id"]).usage
    assert usage["input_tokens"] == recorded["input_tokens"]

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("agentplat_tokens_total", model=model, kind="input") == recorded["input_tokens"]
    assert delta("agentplat_tokens_total", model=model, kind="output") == recorded["output_tokens"]
    assert delta("agentplat_model_calls_total", model=model) == recorded["calls"]

    # Lock waits: the run's admission claimed the busy lock, its end took the session row.
    assert delta("agentplat_lock_wait_seconds_count", lock="busy") >= 1
    assert delta("agentplat_lock_wait_seconds_count", lock="row") >= 2
    assert delta("agentplat_lock_wait_seconds_sum", lock="row") > 0


def test_a_run_queued_behind_another_counts_its_wait_for_the_busy_lock(metrics_token, api, sid):
    before = scraped()
    first = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"content": "pace 40\nsay one two three four five six"}]},
        format="json",
    ).json()
    second = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"content": "say next"}], "multitask_strategy": "enqueue", "wait": True},
        format="json",
    ).json()
    assert second["status"] == "completed", second
    assert Run.objects.get(id=first["id"]).status == "completed"
    after = scraped()
    # Two claims: the first at once, the second at the hand-over, after the first's run.
    count = "agentplat_lock_wait_seconds_count"
    assert value(after, count, lock="busy") - value(before, count, lock="busy") == 2
    waited = value(after, "agentplat_lock_wait_seconds_sum", lock="busy") - value(
        before, "agentplat_lock_wait_seconds_sum", lock="busy"
    )
    assert waited >= 0.1, "the queued run waited for the first one's words (40 ms each)"


async def test_an_event_sent_to_a_websocket_is_observed_in_the_fanout_histogram(
    metrics_token, owner
):
    from config.asgi import application

    sid = await sync_to_async(lambda: new_session(client_for(owner)))()
    token = (await sync_to_async(Token.objects.get_or_create)(user=owner))[0].key
    before = await sync_to_async(scraped)()
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{sid}/?token={token}", headers=HOST
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert "subscribed" in await communicator.receive_from(timeout=5)
    await subscribed(events.group_name(sid))  # Redis delivers to this process from now on
    for status in ("busy", "idle", "busy"):
        events.publish(sid, events.SESSION_STATUS, status=status, run_id=None)
    for _ in range(3):
        event = json.loads(await communicator.receive_from(timeout=5))
        assert event["type"] == events.SESSION_STATUS
    await communicator.disconnect()
    after = await sync_to_async(scraped)()
    count = "agentplat_event_fanout_seconds_count"
    assert value(after, count) - value(before, count) == 3
    spent = value(after, "agentplat_event_fanout_seconds_sum") - value(
        before, "agentplat_event_fanout_seconds_sum"
    )
    assert 0 <= spent < 15, "seconds from the hand-over to the socket, three times"
    fast = "agentplat_event_fanout_seconds_bucket"
    assert value(after, fast, le="10.0") - value(before, fast, le="10.0") == 3


def test_queue_depth_is_the_celery_queue_length_in_redis(metrics_token, settings):
    # In-process runs (the tests' executor): the runs waiting for room in the run host.
    assert value(scraped(), "agentplat_queue_depth") == 0
    # Services mode: the broker's queue. A queue of this test's own that no worker reads.
    settings.RUN_EXECUTOR = "celery"
    queue = f"agentplat-metrics-{uuid.uuid4().hex[:8]}"
    default = current_app.conf.task_default_queue
    current_app.conf.task_default_queue = queue
    try:
        assert value(scraped(), "agentplat_queue_depth") == 0, "an empty queue has no key"
        for i in range(3):
            current_app.send_task(TASK_NAME, args=[f"run_{i}"], queue=queue)
        assert scrape.queue_depth() == 3
        assert value(scraped(), "agentplat_queue_depth") == 3
    finally:
        current_app.conf.task_default_queue = default
        with current_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queue)


def test_a_broker_that_does_not_answer_leaves_the_gauge_out(metrics_token, settings, monkeypatch):
    settings.RUN_EXECUTOR = "celery"

    def down() -> int:
        raise ConnectionError("broker away")

    monkeypatch.setattr(scrape, "queue_depth", down)
    samples = scraped()
    assert ("agentplat_queue_depth", ()) not in samples
    assert ("agentplat_runs", (("status", "completed"),)) in samples
