from __future__ import annotations

import asyncio
import json

import pytest
from channels.layers import channel_layers
from django.db import transaction

from sessions_app import events
from sessions_app.ids import message_id, part_id, session_id


async def _subscribe(sid: str):
    layer = channel_layers.make_backend("default")
    channel = await layer.new_channel()
    await layer.group_add(events.group_name(sid), channel)
    await asyncio.sleep(0.2)  # let the subscription reach the server
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
            await asyncio.sleep(0.06)
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
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            events.publish_on_commit("ses_x", events.SESSION_UPDATED, session={})
            raise RuntimeError("rolled back")
    assert sent == []
    with transaction.atomic():
        events.publish_on_commit("ses_x", events.SESSION_UPDATED, session={})
        assert sent == []
    assert sent == [("ses_x", events.SESSION_UPDATED, {"session": {}})]
