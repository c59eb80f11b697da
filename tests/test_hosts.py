"""Issue 45, step 1: a home host per session. Hosts beat in PostgreSQL; a new session is
placed on the live host with the fewest sessions, a fork on its source's; its runs and its
clone are sent to its host's queue, which every worker consumes beside the default one. The
processes themselves: tests/e2e/test_hosts.py."""

from __future__ import annotations

import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from config import celery as celery_config
from core import mode
from runs_app.execution import runtime
from runs_app.models import Run
from sessions_app import hosts
from sessions_app.models import Host, Session
from sessions_app.repositories import jobs
from tests.conftest import client_for, new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def host(name: str, *, age: float = 0.0) -> Host:
    """A host whose last beat was ``age`` seconds ago."""
    when = timezone.now() - timedelta(seconds=age)
    return Host.objects.create(name=name, last_heartbeat=when, started_at=when)


def homed(name: str, owner: User, n: int) -> None:
    Session.objects.bulk_create(Session(owner=owner, host=name) for _ in range(n))


def test_no_live_host_leaves_the_session_to_any_host(owner, settings):
    assert hosts.place() == ""
    host("old", age=settings.RUN_LEASE_SECONDS + 1)
    assert hosts.place() == ""


def test_the_live_host_with_the_fewest_sessions_is_chosen_ties_by_name(owner, settings):
    host("b"), host("a"), host("c")
    homed("a", owner, 2)
    homed("b", owner, 1)
    homed("c", owner, 1)
    assert hosts.place() == "b"
    homed("b", owner, 1)
    assert hosts.place() == "c"
    # A host whose beat is older than the lease gets nothing, however empty.
    host("dead", age=settings.RUN_LEASE_SECONDS + 1)
    assert hosts.place() == "c"
    # Deleted sessions count no more (they have no row).
    Session.objects.filter(host="a").delete()
    assert hosts.place() == "a"


def test_a_beat_announces_this_process_and_its_disk(settings):
    settings.WORKER_HOST = "here"
    hosts.beat()
    first = Host.objects.get(name="here")
    assert first.pid > 0 and first.disk_total >= first.disk_free > 0
    assert first.workspace_root == str(settings.WORKSPACE_ROOT) and first.version
    hosts.beat()
    again = Host.objects.get(name="here")
    assert again.last_heartbeat > first.last_heartbeat
    assert again.started_at == first.started_at  # the same process: started once
    assert hosts.is_live("here") and hosts.place() == "here"


def test_sessions_through_the_api_spread_and_forks_stay_home(api, owner, settings):
    host("a"), host("b")
    first, second = new_session(api), new_session(api)
    placed = {Session.objects.get(id=s).host for s in (first, second)}
    assert placed == {"a", "b"}
    home = Session.objects.get(id=first).host
    run_turn(api, first, "write plan.txt hello")
    homed(home, owner, 5)  # a new session would go to the other host now; forks stay home
    assert hosts.place() != home
    fork = api.post(f"/api/sessions/{first}/fork/", {}, format="json").json()["id"]
    assert Session.objects.get(id=fork).host == home
    link = api.post(f"/api/sessions/{first}/share/").json()
    viewer = client_for(User.objects.create_user("viewer", password="pw"))
    copy = viewer.post(f"/api/shared/{link['token']}/fork/").json()["id"]
    assert Session.objects.get(id=copy).host == home


def test_a_session_without_a_host_runs_and_each_run_records_its_host(api, settings):
    sid = new_session(api)
    assert Session.objects.get(id=sid).host == ""
    run = run_turn(api, sid, "say hi")
    assert Run.objects.get(id=run["id"]).host == settings.WORKER_HOST


def test_runs_and_clones_are_sent_to_their_hosts_queue(owner, settings, monkeypatch):
    sent = []
    settings.RUN_EXECUTOR = "celery"  # sent, not run here
    monkeypatch.setattr(runtime, "_leaving", threading.Event())  # no drain of another test
    monkeypatch.setattr(
        mode.current_app, "send_task", lambda name, **kw: sent.append((name, kw.get("queue")))
    )
    host("a"), host("dead", age=settings.RUN_LEASE_SECONDS + 1)
    at_a = Session.objects.create(owner=owner, host="a")
    at_dead = Session.objects.create(owner=owner, host="dead")
    anywhere = Session.objects.create(owner=owner)
    for session in (at_a, at_dead, anywhere):
        run = Run.objects.create(session=session)
        runtime.enqueue(run.id)
        jobs.enqueue_prepare(session.id, "job")
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.a"
    assert sent == [
        (runtime.TASK_NAME, queue),
        (jobs.PREPARE_TASK, queue),
        # A host not live, or none: the default queue, where any worker of the shared
        # volume takes it (later steps re-home instead).
        (runtime.TASK_NAME, None),
        (jobs.PREPARE_TASK, None),
        (runtime.TASK_NAME, None),
        (jobs.PREPARE_TASK, None),
    ]
    # A stopping process (drain.py) hands its runs to any worker: its host's queue may have
    # no other reader (tests/e2e/test_hosts.py stops a host mid-run).
    sent.clear()
    runtime.leaving()
    runtime.enqueue(Run.objects.create(session=at_a).id)
    assert sent == [(runtime.TASK_NAME, None)]


@pytest.mark.parametrize("given", [None, "default"])
def test_a_worker_consumes_its_hosts_queue_beside_the_default_one(settings, given):
    settings.WORKER_HOST = "h1"
    queues = celery_config.app.amqp.Queues(None)  # as a worker builds them: the default queue
    queues.select(
        [settings.CELERY_TASK_DEFAULT_QUEUE] if given else None
    )  # the worker's -Q (none: every queue declared)
    celery_config._consume_host_queue(
        SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=queues)))
    )
    names = set(queues.consume_from)
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    assert names == {default, f"{default}.host.h1"}


def test_the_admin_shows_hosts_and_a_sessions_host(owner, settings):
    host("a"), host("gone", age=settings.RUN_LEASE_SECONDS + 1)
    homed("a", owner, 3)
    Host.objects.filter(name="a").update(disk_total=2 * 1024**3, disk_free=1024**3)
    root = User.objects.create_superuser("root", password="pw")
    browser = Client()
    browser.force_login(root)
    page = browser.get("/admin/sessions_app/host/").content.decode()
    assert "gone" in page and "1.0 GB of 2.0 GB" in page
    assert 'href="/admin/sessions_app/session/?host=a">3</a>' in page
    # live: one of the two; draining: neither
    assert page.count("icon-yes.svg") == 1 and page.count("icon-no.svg") == 3
    listed = browser.get("/admin/sessions_app/session/?host=a").content.decode()
    assert listed.count('class="session-id"') == 3
    one = Session.objects.filter(host="a").first()
    change = browser.get(f"/admin/sessions_app/session/{one.pk}/change/").content.decode()
    assert "field-host" in change
    run = Run.objects.create(session=one, host="a")
    ran = browser.get(f"/admin/runs_app/run/{run.pk}/change/").content.decode()
    assert "field-host" in ran  # where it executed
    staff = Client()
    staff.force_login(User.objects.create_user("staff", password="pw", is_staff=True))
    assert staff.get("/admin/sessions_app/host/").status_code == 403


def test_the_admin_drains_a_host_and_shows_it(owner, settings):
    host("a"), host("b")
    homed("a", owner, 2)
    root = User.objects.create_superuser("root", password="pw")
    browser = Client()
    browser.force_login(root)
    url = "/admin/sessions_app/host/"
    done = browser.post(url, {"action": "drain", "_selected_action": ["a"]}, follow=True)
    assert "A is draining: 2 moved, 0 busy" in done.content.decode()  # capitalised
    assert Host.objects.get(name="a").draining
    assert set(Session.objects.values_list("host", flat=True)) == {"b"}
    waiting = browser.get(url + "?draining__exact=1").content.decode()
    assert 'class="field-name"' in waiting and ">a<" in waiting and ">b<" not in waiting
    browser.post(url, {"action": "undrain", "_selected_action": ["a"]})
    assert not Host.objects.get(name="a").draining
