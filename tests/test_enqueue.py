"""A run's task as the web process sends it to the broker (services mode)."""

from __future__ import annotations

import threading
import uuid

from celery import Celery, current_app

from runs_app.execution import runtime


def test_a_run_is_enqueued_without_a_result_backend(settings, monkeypatch, db):
    """No result of the run's task is ever read (a run's outcome is its row), so the send
    neither builds Celery's result backend (per thread, and a request's thread is new each
    time under ASGI) nor asks the worker to store a result. (``db``: the send reads the
    home host of the run's session; this run has none, so the default queue.)"""
    settings.RUN_EXECUTOR = "celery"
    queue = f"agentplat-enqueue-{uuid.uuid4().hex[:8]}"  # no worker reads it
    default = current_app.conf.task_default_queue
    current_app.conf.task_default_queue = queue

    def no_backend(self):  # noqa: ANN001, ANN202
        raise AssertionError("the send built a result backend")

    monkeypatch.setattr(Celery, "_get_backend", no_backend)
    failed: list[BaseException] = []

    def send() -> None:  # a thread of its own: no backend cached for it yet
        try:
            runtime.enqueue("run_enqueued")
        except BaseException as exc:  # noqa: BLE001
            failed.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    thread.join(30)
    try:
        assert not failed, failed
        with current_app.connection_for_write() as conn:
            message = conn.default_channel.basic_get(queue)
            assert message is not None, "the task reached the queue"
            assert message.headers["id"] == "run_enqueued"
            assert message.headers["ignore_result"] is True
    finally:
        current_app.conf.task_default_queue = default
        with current_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queue)
