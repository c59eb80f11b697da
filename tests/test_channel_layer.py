"""The pipelined pub/sub layer (realtime/channel_layer.py) delivers what ``group_send``
would, in order, through a real Redis to a real subscriber — it reaches into channels_redis's
internals, so this is the test that tells when an upgrade breaks it."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from django.conf import settings

from realtime.channel_layer import PipelinedPubSubChannelLayer

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis")


async def test_group_send_many_reaches_the_subscribers_in_order():
    sender = PipelinedPubSubChannelLayer(hosts=[settings.REDIS_URL], prefix="agentplat-test")
    receiver = PipelinedPubSubChannelLayer(hosts=[settings.REDIS_URL], prefix="agentplat-test")
    a, b = await receiver.new_channel(), await receiver.new_channel()
    await receiver.group_add("group.a", a)
    await receiver.group_add("group.b", b)
    messages = [
        ("group.a" if i % 3 else "group.b", {"type": "session.event", "text": str(i)})
        for i in range(300)
    ]
    await sender.group_send_many(messages)
    got_a = [(await receiver.receive(a))["text"] for _ in range(200)]
    got_b = [(await receiver.receive(b))["text"] for _ in range(100)]
    assert got_a == [m["text"] for g, m in messages if g == "group.a"]
    assert got_b == [m["text"] for g, m in messages if g == "group.b"]
    await sender.flush()
    await receiver.flush()


def _event(text: str, **fields) -> dict:  # noqa: ANN003
    from realtime.channel_layer import PREV_MARK, SEQ_MARK

    body = {"type": "session.status", "session_id": "s", "seq": SEQ_MARK, "prev": PREV_MARK}
    return {"type": "session.event", "text": json.dumps({**body, "status": text, **fields})}


async def test_number_and_publish_numbers_in_redis_what_group_send_would_send():
    """One round trip numbers the events as ``reserve_seqs`` does and publishes them: each
    event's JSON the same as numbered in Python, but for the spaces that pad its numbers."""
    sender = PipelinedPubSubChannelLayer(hosts=[settings.REDIS_URL], prefix="agentplat-test")
    receiver = PipelinedPubSubChannelLayer(hosts=[settings.REDIS_URL], prefix="agentplat-test")
    assert sender.numbers_in_redis()
    group_a, group_b = f"group.{uuid.uuid4().hex}", f"group.{uuid.uuid4().hex}"
    a, b = await receiver.new_channel(), await receiver.new_channel()
    await receiver.group_add(group_a, a)
    await receiver.group_add(group_b, b)
    # Text that looks like the marks (inside a JSON string: never taken for them), and text
    # of several bytes a character (the marks' places are in bytes).
    texts = ["plain", f'"seq": {10**18 + 1}', "ünïcødé ✓ 𝄞", "x" * 70_000]
    now = time.time_ns() // 1000
    batch = [(group_a if i % 2 == 0 else group_b, _event(t)) for i, t in enumerate(texts)]
    await sender.number_and_publish(batch, unknown=set(), now_us=now)
    got_a = [json.loads((await receiver.receive(a))["text"]) for _ in range(2)]
    got_b = [json.loads((await receiver.receive(b))["text"]) for _ in range(2)]
    assert [e["status"] for e in got_a] == [texts[0], texts[2]]
    assert [e["status"] for e in got_b] == [texts[1], texts[3]]
    for got in (got_a, got_b):
        assert got[0]["prev"] is None, "a group's first event has no predecessor"
        assert got[0]["seq"] == now + 1 and got[1]["seq"] == now + 2
        assert got[1]["prev"] == got[0]["seq"]

    # The next batch continues each group's sequence, whichever process sends it; a group
    # named unknown (events of it were lost) starts with prev null.
    more = [(group_a, _event("next")), (group_b, _event("after a loss")), (group_b, _event("z"))]
    await sender.number_and_publish(more, unknown={group_b}, now_us=now)
    nxt = json.loads((await receiver.receive(a))["text"])
    lost, z = [json.loads((await receiver.receive(b))["text"]) for _ in range(2)]
    assert nxt["prev"] == got_a[1]["seq"] and nxt["seq"] == got_a[1]["seq"] + 1
    assert lost["prev"] is None and lost["seq"] > got_b[1]["seq"]
    assert z["prev"] == lost["seq"]
    with pytest.raises(ValueError, match="marks"):
        await sender.number_and_publish(
            [(group_a, {"type": "x", "text": "{}"})], unknown=set(), now_us=now
        )
    await sender.flush()
    await receiver.flush()


def test_encrypted_messages_are_not_numbered_in_redis():
    layer = PipelinedPubSubChannelLayer(
        hosts=[settings.REDIS_URL], symmetric_encryption_keys=["a" * 32]
    )
    assert not layer.numbers_in_redis()
