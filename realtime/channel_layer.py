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
group continues one sequence (``realtime/events.py``: ``seq`` and ``prev``);
``number_and_publish`` does that and publishes them, in one round trip.
"""

from __future__ import annotations

import hashlib
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer
from redis.exceptions import NoScriptError

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


# ``number_and_publish``: an event's JSON holds these two numbers where its ``seq`` and ``prev``
# go, as many digits as any of them can have (an int64's); Redis writes the real ones over
# them, padded with spaces (JSON's whitespace), so the serialized message keeps its length.
WIDTH = 19
SEQ_MARK, PREV_MARK = 10**18 + 1, 10**18 + 2
_SEQ_BYTES, _PREV_BYTES = str(SEQ_MARK).encode(), str(PREV_MARK).encode()

# KEYS: each group's counter. ARGV: now (µs), the TTL; for each key its count and whether its
# first ``prev`` is unknown ("1"); then for each message: its key's index, its channel, its
# serialized bytes and the (1-based) places of its seq's and prev's marks. Numbers as
# ``_RESERVE`` gives them; each message published with them written over its marks.
_NUMBER_AND_PUBLISH = """
local width, now, ttl, keys = WIDTH, ARGV[1], ARGV[2], #KEYS
local nexts, prevs = {}, {}
for k = 1, keys do
  local count = tonumber(ARGV[1 + 2 * k])
  local last = redis.call('GET', KEYS[k])
  if not last or tonumber(last) < tonumber(now) then redis.call('SET', KEYS[k], now) end
  nexts[k] = redis.call('INCRBY', KEYS[k], count) - count + 1
  redis.call('EXPIRE', KEYS[k], ttl)
  if not last or ARGV[2 + 2 * k] == '1' then prevs[k] = 'null' else prevs[k] = last end
end
local function fit(text) return text .. string.rep(' ', width - #text) end
for i = 3 + 2 * keys, #ARGV, 5 do
  local k, data = tonumber(ARGV[i]), ARGV[i + 2]
  local at_seq, at_prev = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local seq = string.format('%.0f', nexts[k])
  redis.call('PUBLISH', ARGV[i + 1], string.sub(data, 1, at_seq - 1) .. fit(seq)
    .. string.sub(data, at_seq + width, at_prev - 1) .. fit(prevs[k])
    .. string.sub(data, at_prev + width))
  nexts[k], prevs[k] = nexts[k] + 1, seq
end
return keys
""".replace("WIDTH", str(WIDTH))
_NUMBER_AND_PUBLISH_SHA = hashlib.sha1(_NUMBER_AND_PUBLISH.encode()).hexdigest()


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

    def numbers_in_redis(self) -> bool:
        """Whether ``number_and_publish`` can write the numbers into the serialized messages
        (not when they are encrypted)."""
        return getattr(self._serializer, "crypter", None) is None

    async def number_and_publish(
        self, messages: list[tuple[str, dict[str, Any]]], *, unknown: set[str], now_us: int
    ) -> None:
        """``group_send(group, message)`` for each pair, in order, each message's JSON
        ``text`` numbered as ``reserve_seqs`` numbers (its ``SEQ_MARK`` and ``PREV_MARK``
        replaced; ``prev`` null for the first of a group in ``unknown``): one script, one
        round trip a shard."""
        layer = self._get_layer()
        by_shard: dict[int, tuple[Any, list[tuple[str, str, bytes]]]] = {}
        for group, message in messages:
            channel = layer._get_group_channel_name(group)
            shard = layer._get_shard(channel)
            by_shard.setdefault(id(shard), (shard, []))[1].append(
                (group, channel, self.serialize(message))
            )
        for shard, items in by_shard.values():
            counts: dict[str, int] = {}
            for group, _, _ in items:
                counts[group] = counts.get(group, 0) + 1
            index = {group: k for k, group in enumerate(counts, start=1)}
            args: list[Any] = [now_us, SEQ_TTL]
            for group, count in counts.items():
                args += [count, "1" if group in unknown else "0"]
            for group, channel, data in items:
                at_seq = data.find(_SEQ_BYTES)
                at_prev = data.find(_PREV_BYTES, at_seq + WIDTH)
                if at_seq < 0 or at_prev < 0:
                    raise ValueError(f"a message to {group} without its numbers' marks")
                args += [index[group], channel, data, at_seq + 1, at_prev + 1]
            keys = [f"{layer.prefix}__seq__{group}" for group in counts]
            async with shard._lock:
                shard._ensure_redis()
                try:
                    await shard._redis.evalsha(_NUMBER_AND_PUBLISH_SHA, len(keys), *keys, *args)
                except NoScriptError:  # the first time on this Redis (or after a restart)
                    await shard._redis.eval(_NUMBER_AND_PUBLISH, len(keys), *keys, *args)
