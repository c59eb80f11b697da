"""channels_redis's pub/sub channel layer, plus ``group_send_many``: many group messages in
one Redis pipeline — one round trip and one write — instead of one PUBLISH round trip each.

A worker process publishes every frame of every live run of its host; one PUBLISH awaited at
a time capped it at one round trip per frame, and under load the frames queued up (seconds
of delay at 2,000 frames/s). What a subscriber (Daphne's consumers) receives is exactly what
``group_send`` would have sent: the same channel name, the same serialized message.

This reaches into the layer's per-loop state (``_get_layer``, ``_get_group_channel_name``,
``_get_shard`` and the shard's connection and lock) — channels_redis 4.x;
``tests/test_channel_layer.py`` checks it against a real Redis and a real subscriber.

``reserve_seqs`` numbers the events of groups in Redis, so that every process publishing to a
group continues one sequence (``realtime/events.py``: ``seq`` and ``prev``).
"""

from __future__ import annotations

from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer

SEQ_TTL = 7 * 24 * 3600  # a group's counter outlives any socket that could compare with it

# For each key: raise the counter to ARGV[1] (now, in µs) when below it, then add the count.
# Gives back the value before (nil when there was none) and after. Lua numbers are doubles:
# exact up to 2^53, and only Redis (INCRBY, SET of the argument string) writes the value.
_RESERVE = """
local out = {}
for i, key in ipairs(KEYS) do
  local last = redis.call('GET', key)
  if not last or tonumber(last) < tonumber(ARGV[1]) then redis.call('SET', key, ARGV[1]) end
  out[i] = {last, redis.call('INCRBY', key, ARGV[i + 2])}
  redis.call('EXPIRE', key, ARGV[2])
end
return out
"""


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

    async def reserve_seqs(
        self, counts: dict[str, int], now_us: int
    ) -> dict[str, tuple[int | None, int]]:
        """Numbers for ``counts[group]`` events of each group, shared by every process on
        this Redis: ``group → (prev, first)``, the events taking ``first, first + 1, …``;
        ``prev`` is the number given out last for the group (None: none is known — a new
        group, or a Redis that lost its keys). Numbers are at least ``now_us + 1``, so they
        keep increasing when a counter is lost."""
        layer = self._get_layer()
        by_shard: dict[int, tuple[Any, list[str]]] = {}
        for group in counts:
            shard = layer._get_shard(layer._get_group_channel_name(group))
            by_shard.setdefault(id(shard), (shard, []))[1].append(group)
        out: dict[str, tuple[int | None, int]] = {}
        for shard, groups in by_shard.values():
            keys = [f"{layer.prefix}__seq__{group}" for group in groups]
            args = [now_us, SEQ_TTL, *(counts[group] for group in groups)]
            async with shard._lock:
                shard._ensure_redis()
                got = await shard._redis.eval(_RESERVE, len(keys), *keys, *args)
            for group, (last, top) in zip(groups, got, strict=True):
                out[group] = (None if last is None else int(last), int(top) - counts[group] + 1)
        return out
