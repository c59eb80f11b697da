"""The pipelined pub/sub layer (realtime/channel_layer.py) delivers what ``group_send``
would, in order, through a real Redis to a real subscriber — it reaches into channels_redis's
internals, so this is the test that tells when an upgrade breaks it."""

from __future__ import annotations

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
