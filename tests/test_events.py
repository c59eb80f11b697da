from __future__ import annotations

import asyncio
import json

import pytest
from channels.layers import channel_layers
from django.db import transaction

from core.ids import message_id, part_id, session_id
from realtime import events
from tests.support.waits import subscribed


async def _subscribe(sid: str):
    layer = channel_layers.make_backend("default")
    channel = await layer.new_channel()
    await layer.group_add(events.group_name(sid), channel)
    await subscribed(events.group_name(sid))  # the server delivers to it from now on
    return layer, channel


async def _receive_until(layer, channel, type: str, timeout: float = 5.0) -> list[dict]:
    got = []
    while True:
        message = await asyncio.wait_for(layer.receive(channel), timeout)
        event = json.loads(message["text"])
        got.append(event)
        if event["type"] == type:
            return got


async def test_deltas_are_coalesced_into_frames_in_order(settings):
    settings.STREAM_FRAME_MS = 50
    sid, mid, pid = session_id(), message_id(), part_id()
    layer, channel = await _subscribe(sid)
    words = [f"w{i} " for i in range(40)]
    offset = 0
    for i, word in enumerate(words):
        events.publish_delta(
            sid, message_id=mid, part_id=pid, offset=offset, text=word, reasoning=False
        )
        offset += len(word)
        if i % 10 == 9:
            await asyncio.sleep(0.06)  # scenario: a pause past the frame between bursts
    events.publish(sid, events.PART_UPDATED, part={"id": pid, "text": "".join(words)})
    got = await _receive_until(layer, channel, events.PART_UPDATED)
    deltas = [e for e in got if e["type"] == events.TEXT_DELTA]
    assert got[-1]["type"] == events.PART_UPDATED, "pending deltas go out before other events"
    assert "".join(d["text"] for d in deltas) == "".join(words)
    position = 0
    for d in deltas:
        assert d["offset"] == position and d["part_id"] == pid and d["message_id"] == mid
        position += len(d["text"])
    assert 4 <= len(deltas) < 20, "40 deltas in ~4 bursts travel as a few frames"
    seqs = [e["seq"] for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(e["session_id"] == sid for e in got)


async def test_a_lone_delta_is_not_held_back(settings):
    settings.STREAM_FRAME_MS = 500
    sid = session_id()
    layer, channel = await _subscribe(sid)
    loop = asyncio.get_running_loop()
    start = loop.time()
    events.publish_delta(sid, message_id="m", part_id="p", offset=0, text="hi", reasoning=False)
    got = await _receive_until(layer, channel, events.TEXT_DELTA)
    assert got[0]["text"] == "hi"
    assert loop.time() - start < 0.25, "the first delta of a quiet frame goes out at once"


def test_every_event_type_round_trips_through_json():
    for type in events.EVENT_TYPES:
        event = {"type": type, "session_id": "ses_x", "seq": 1, "payload": {"a": [1, "b"]}}
        assert json.loads(json.dumps(event)) == event


@pytest.mark.django_db(transaction=True)
def test_events_of_a_rolled_back_transaction_are_never_sent(monkeypatch):
    sent = []
    monkeypatch.setattr(events.publisher, "publish", lambda *args: sent.append(args))
    with pytest.raises(RuntimeError), transaction.atomic():
        events.publish_on_commit("ses_x", events.SESSION_UPDATED, session={})
        raise RuntimeError("rolled back")
    assert sent == []
    with transaction.atomic():
        events.publish_on_commit("ses_x", events.SESSION_UPDATED, session={})
        assert sent == []
    assert sent == [("ses_x", events.SESSION_UPDATED, {"session": {}})]


async def test_each_event_names_the_one_before_it(settings):
    """``prev`` is the ``seq`` of the session's previous event (null for its first), across
    frames, deltas and other events: a client that last saw another number missed some."""
    settings.STREAM_FRAME_MS = 20
    sid, other = session_id(), session_id()
    layer, channel = await _subscribe(sid)
    events.publish(sid, events.SESSION_STATUS, status="busy", run_id="run_x")
    events.publish(other, events.SESSION_STATUS, status="busy", run_id="run_y")  # its own count
    for i in range(12):
        events.publish_delta(sid, message_id="m", part_id="p", offset=i, text="x", reasoning=False)
        if i % 4 == 3:
            await asyncio.sleep(0.03)  # scenario: a pause past the frame, deltas in frames
    events.publish(sid, events.PART_UPDATED, part={"id": "p", "text": "x" * 12})
    events.publish(sid, events.RUN_UPDATED, run={"id": "run_x", "status": "completed"})
    got = await _receive_until(layer, channel, events.RUN_UPDATED)
    assert len(got) >= 5 and {e["session_id"] for e in got} == {sid}
    assert got[0]["prev"] is None, "a session's first event has no predecessor"
    for before, event in zip(got, got[1:], strict=False):
        assert event["prev"] == before["seq"] < event["seq"]


@pytest.fixture
def second_publisher():
    """A publisher as another process has one: its own loop, layer and memory."""
    publisher = events.Publisher()
    yield publisher
    loop = publisher._loop
    if loop is not None:

        async def cancel_tasks() -> None:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(cancel_tasks(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)


async def test_every_process_continues_the_sessions_one_sequence(settings, second_publisher):
    """The web process and a worker publish to one session: one counter (in Redis) numbers
    both, so ``prev`` chains across them, and a counter Redis lost says ``prev`` null."""
    layer, _ = await _subscribe(session_id())
    if not hasattr(layer, "reserve_seqs"):
        pytest.skip("the in-memory layer: one process numbers every event")
    import redis

    sid = session_id()
    layer, channel = await _subscribe(sid)
    web, worker = events.publisher, second_publisher
    for i in range(6):
        (web if i % 2 else worker).publish(sid, events.SESSION_STATUS, {"status": f"s{i}"})
        await asyncio.to_thread((web if i % 2 else worker).flush)
    got = [json.loads((await layer.receive(channel))["text"]) for _ in range(6)]
    assert [e["status"] for e in got] == [f"s{i}" for i in range(6)]
    for before, event in zip(got, got[1:], strict=False):
        assert event["prev"] == before["seq"] < event["seq"]

    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    redis.Redis.from_url(settings.REDIS_URL).delete(f"{prefix}__seq__{events.group_name(sid)}")
    worker.publish(sid, events.SESSION_STATUS, {"status": "after"})
    after = json.loads((await layer.receive(channel))["text"])
    assert after["prev"] is None and after["seq"] > got[-1]["seq"]


class _FakeLayer:
    """A channel layer that records what is sent; ``reserve_seqs`` (a shared counter) fails
    ``failures`` times (Redis away) when ``shared``."""

    def __init__(self, shared: bool) -> None:
        self.sent: list[dict] = []
        self.failures = 0
        self.counter: dict[str, int] = {}
        if shared:
            self.reserve_seqs = self._reserve

    async def _reserve(self, counts, now_us):  # noqa: ANN001, ANN202
        if self.failures:
            self.failures -= 1
            raise ConnectionError("Redis is away")
        out = {}
        for group, n in counts.items():
            last = self.counter.get(group)
            out[group] = (last, max((last or 0) + 1, now_us + 1))
            self.counter[group] = out[group][1] + n - 1
        return out

    async def group_send(self, group, message):  # noqa: ANN001, ANN202
        self.sent.append(json.loads(message["text"]))


@pytest.mark.parametrize("shared", [True, False], ids=["redis-counter", "in-process"])
def test_events_lost_before_numbering_make_the_next_prev_unknown(
    shared, second_publisher, monkeypatch
):
    publisher = second_publisher
    publisher._ensure_loop()
    layer = publisher._layer = _FakeLayer(shared)
    sid = session_id()
    monkeypatch.setattr(events, "SEND_RETRY_SECONDS", 0.5)

    def publish(status: str) -> None:
        publisher.publish(sid, events.SESSION_STATUS, {"status": status})
        assert publisher.flush()

    publish("one")
    publish("two")
    if shared:
        layer.failures = 1
        publish("late")  # Redis away a moment: tried again, sent late (prev unknown)
        layer.failures = 1000
        publish("lost")  # Redis away past SEND_RETRY_SECONDS: numbered nowhere, sent nowhere
        layer.failures = 0
    publish("three")
    publish("four")
    got = {e["status"]: e for e in layer.sent}
    expected = (
        ["one", "two", "late", "three", "four"] if shared else ["one", "two", "three", "four"]
    )
    assert list(got) == expected
    assert got["one"]["prev"] is None and got["two"]["prev"] == got["one"]["seq"]
    if shared:
        assert got["late"]["prev"] is None, "after a failure the client re-reads"
        assert got["three"]["prev"] is None, "the client cannot tell what it missed: it re-reads"
    else:
        assert got["three"]["prev"] == got["two"]["seq"]
    assert got["four"]["prev"] == got["three"]["seq"] > got["two"]["seq"]


async def test_a_batch_redis_numbers_and_publishes_that_fails_makes_the_next_prev_unknown(
    second_publisher,
):
    """Numbered and published in one round trip (``number_and_publish``): a batch that fails
    may or may not have reached Redis, so what is sent next of its sessions says ``prev``
    null, and the clients re-read."""
    sid = session_id()
    listener, channel = await _subscribe(sid)
    if not hasattr(listener, "number_and_publish"):
        pytest.skip("the in-memory layer: one process numbers every event")
    publisher = second_publisher
    publisher._ensure_loop()
    sending = publisher._get_layer()
    failures = [1]
    real = sending.number_and_publish

    async def flaky(messages, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("Redis is away")
        await real(messages, **kwargs)

    sending.number_and_publish = flaky
    for status in ("one", "two"):
        publisher.publish(sid, events.SESSION_STATUS, {"status": status})
        await asyncio.to_thread(publisher.flush)
    failures[0] = 1
    publisher.publish(sid, events.SESSION_STATUS, {"status": "late"})  # tried again, sent
    await asyncio.to_thread(publisher.flush)
    publisher.publish(sid, events.SESSION_STATUS, {"status": "next"})
    await asyncio.to_thread(publisher.flush)
    got = [json.loads((await listener.receive(channel))["text"]) for _ in range(4)]
    assert [e["status"] for e in got] == ["one", "two", "late", "next"]
    assert got[1]["prev"] == got[0]["seq"]
    assert got[2]["prev"] is None, "after a failure the client re-reads"
    assert got[3]["prev"] == got[2]["seq"] > got[1]["seq"]
    await listener.flush()
