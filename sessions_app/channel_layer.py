"""channels_redis's pub/sub channel layer, plus ``group_send_many``: many group messages in
one Redis pipeline — one round trip and one write — instead of one PUBLISH round trip each.

A worker process publishes every frame of every live run of its host; one PUBLISH awaited at
a time capped it at one round trip per frame, and under load the frames queued up (seconds
of delay at 2,000 frames/s). What a subscriber (Daphne's consumers) receives is exactly what
``group_send`` would have sent: the same channel name, the same serialized message.

This reaches into the layer's per-loop state (``_get_layer``, ``_get_group_channel_name``,
``_get_shard`` and the shard's connection and lock) — channels_redis 4.x;
``tests/test_channel_layer.py`` checks it against a real Redis and a real subscriber.
"""

from __future__ import annotations

from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer


class PipelinedPubSubChannelLayer(RedisPubSubChannelLayer):
    async def group_send_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """``group_send(group, message)`` for each pair, in order, one pipeline per shard."""
        layer = self._get_layer()
        by_shard: dict[int, tuple[Any, list[tuple[str, bytes]]]] = {}
        for group, message in messages:
            channel = layer._get_group_channel_name(group)
            shard = layer._get_shard(channel)
            by_shard.setdefault(id(shard), (shard, []))[1].append(
                (channel, self.serialize(message))
            )
        for shard, items in by_shard.values():
            async with shard._lock:
                shard._ensure_redis()
                pipe = shard._redis.pipeline(transaction=False)
                for channel, data in items:
                    pipe.publish(channel, data)
                await pipe.execute()
