"""The built-in ``scripted`` model: deterministic, stateless, driven by the user's message.

At each step it reads the transcript, takes the latest user message as a script, counts the
tool rounds answered since it, and emits the next segment: its text lines, then its tool lines
(one step's tool batch). When the script is exhausted it stops; if the previous step called
tools it first says ``done``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from ..compaction import MARKER
from .base import (
    Finish,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    StructuredOutput,
    SyncStream,
    TextDelta,
    ToolCall,
)

TOOL_DIRECTIVES = {"write", "append", "delete", "read", "list", "wait", "shell"}
TEXT_DIRECTIVES = {"say", "think", "pace", "fail", "json"}
DIRECTIVES = TOOL_DIRECTIVES | TEXT_DIRECTIVES


@dataclass
class Segment:
    lines: list[tuple[str, str]] = field(default_factory=list)
    tools: list[tuple[str, str]] = field(default_factory=list)


def _split(line: str) -> tuple[str, str]:
    # Only the line's leading whitespace goes: the text of write/say is kept exactly.
    word, _, rest = line.lstrip().rstrip("\r").partition(" ")
    return word.lower(), rest


def parse(script: str) -> list[Segment] | None:
    """Segments of a script; None when it has no directive (then the reply is an echo)."""
    lines = [ln for ln in script.splitlines() if ln.strip()]
    if not any(_split(ln)[0] in DIRECTIVES for ln in lines):
        return None
    segments: list[Segment] = []
    current = Segment()
    for line in lines:
        word, rest = _split(line)
        if word in TOOL_DIRECTIVES:
            current.tools.append((word, rest))
            continue
        if current.tools:
            segments.append(current)
            current = Segment()
        if word in TEXT_DIRECTIVES:
            current.lines.append((word, rest))
        else:
            current.lines.append(("say", line.strip()))
    if current.lines or current.tools:
        segments.append(current)
    return segments


def tool_arguments(word: str, rest: str) -> dict[str, Any]:
    if word in {"write", "append"}:
        path, _, text = rest.partition(" ")
        return {"path": path, "content": text}
    if word in {"delete", "read"}:
        return {"path": rest.strip()}
    if word == "list":
        return {"path": rest.strip()}
    if word == "wait":
        try:
            return {"seconds": float(rest.strip() or 1)}
        except ValueError:
            return {"seconds": rest.strip()}
    return {"command": rest}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


class ScriptedProvider(SyncStream):
    name = "scripted"

    def __init__(self, model: str = "scripted") -> None:
        self.model = model

    async def astream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        # Like a real model, it reports what it was sent (estimated as characters / 4).
        prompt_tokens = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) // 4
        if last_user is None:
            yield Finish(usage={"input_tokens": prompt_tokens})
            return
        script = _content_text(messages[last_user].get("content"))
        after = messages[last_user + 1 :]
        if script.startswith(MARKER):
            # A compaction call (runs_app/compaction.py): a short, deterministic summary.
            events = self._summary(script, prompt_tokens, should_abort)
        elif (segments := parse(script)) is None:
            events = self._echo(script, after, prompt_tokens, should_abort)
        else:
            events = self._step(segments, after, prompt_tokens, should_abort)
        async for event in events:
            yield event

    async def _summary(
        self, script: str, prompt_tokens: int, should_abort: Callable[[], bool]
    ) -> AsyncIterator[StreamEvent]:
        summary = scripted_summary(script)
        async for delta in self._words(summary, 0, should_abort):
            yield delta
        yield Finish(usage={"input_tokens": prompt_tokens, "output_tokens": len(summary.split())})

    async def _echo(
        self,
        script: str,
        after: list[dict[str, Any]],
        prompt_tokens: int,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]:
        """A message with no directive is echoed once, at its first step."""
        rounds = _rounds(after)
        if rounds == 0 and not any(m["role"] == "assistant" for m in after):
            async for delta in self._words(f"You said: {script.strip()}", 0, should_abort):
                yield delta
        yield Finish(
            usage={"input_tokens": prompt_tokens, "output_tokens": len(script.split()) + 2}
        )

    async def _step(
        self,
        segments: list[Segment],
        after: list[dict[str, Any]],
        prompt_tokens: int,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]:
        """The segment of the script this step is at (one per tool round answered): its
        lines, then its tool calls; past the last one, ``done`` after a tool round."""
        rounds = _rounds(after)
        pace = settings.SCRIPTED_DEFAULT_PACE_MS
        for seg in segments[:rounds]:
            for word, rest in seg.lines:
                if word == "pace":
                    pace = _pace(rest, pace)
        emitted = 0
        if rounds >= len(segments):
            previous = next((m for m in reversed(after) if m["role"] == "assistant"), None)
            if previous is not None and previous.get("tool_calls"):
                async for delta in self._words("done", pace, should_abort):
                    yield delta
                emitted = 1
            yield Finish(usage=_usage(prompt_tokens, emitted))
            return

        segment = segments[rounds]
        async for event in self._lines(segment, after, pace, should_abort):
            if isinstance(event, TextDelta):
                emitted += len(event.text.split())
            yield event
        for index, (word, rest) in enumerate(segment.tools):
            args = tool_arguments(word, rest)
            yield ToolCall(
                call_id=f"call_{rounds}_{index}",
                name=word,
                arguments=args,
                raw_arguments=json.dumps(args),
            )
        yield Finish(
            usage={"input_tokens": prompt_tokens, "output_tokens": emitted + len(segment.tools)}
        )

    async def _lines(
        self,
        segment: Segment,
        after: list[dict[str, Any]],
        pace: float,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]:
        """A segment's text lines, played; when the transcript ends with an answer so far
        (docs/scripted-model.md "Resume after a stop"), the lines before the point where it
        stopped are not played again and the ``say`` line it stopped in says its rest."""
        skip = answer_so_far(segment, after)
        for word, rest in segment.lines:
            if should_abort():
                return
            if word == "pace":
                pace = _pace(rest, pace)
            elif skip is not None:
                text = with_line_breaks(rest) if word == "say" else ""
                if word == "say" and len(skip) < len(text):
                    async for delta in self._words(text[len(skip) :], pace, should_abort):
                        yield delta
                    skip = None
                elif word == "say":
                    skip = skip[len(text) :] or None
            elif word == "say":
                async for delta in self._words(with_line_breaks(rest), pace, should_abort):
                    yield delta
            elif word == "think":
                async for delta in self._words(with_line_breaks(rest), pace, should_abort):
                    yield ReasoningDelta(delta.text)
            elif word == "fail":
                raise ProviderError(rest.strip() or "Scripted failure.")
            elif word == "json":
                yield _structured(rest)

    async def _words(
        self, text: str, pace_ms: float, should_abort: Callable[[], bool]
    ) -> AsyncIterator[TextDelta]:
        start = time.monotonic()
        for i, word in enumerate(words_of(text)):
            if should_abort():
                return
            if i and pace_ms > 0:
                # On a fixed schedule (word i at start + i × pace), like a model that emits
                # at a steady rate: the time spent handling a word does not slow the next.
                await asyncio.sleep(max(0.0, start + i * pace_ms / 1000.0 - time.monotonic()))
            yield TextDelta(word)


def answer_so_far(segment: Segment, after: list[dict[str, Any]]) -> str | None:
    """The text of the answer so far when the transcript ends with one (an assistant entry
    with text and no tool calls: a stopped answer, handed back to be continued) and that
    text begins the segment's text (its ``say`` lines joined); else None (the segment is
    played whole)."""
    last = after[-1] if after else None
    if last is None or last["role"] != "assistant" or last.get("tool_calls"):
        return None
    so_far = _content_text(last.get("content"))
    said = "".join(with_line_breaks(rest) for word, rest in segment.lines if word == "say")
    return so_far if so_far and said.startswith(so_far) else None


def with_line_breaks(text: str) -> str:
    """``say``/``think`` text with each two-character ``\\n`` made a line break (a script is
    one line per directive, so this is how a Markdown list or code block is scripted)."""
    return text.replace("\\n", "\n")


def words_of(text: str) -> list[str]:
    """The streamed pieces of ``text``: each word with the one space or line break before it,
    so that they join back to exactly ``text`` (runs of spaces and blank lines included)."""
    pieces: list[str] = []
    for i, chunk in enumerate(text.split(" ")):
        for j, word in enumerate(chunk.split("\n")):
            pieces.append(word if i == j == 0 else ("\n" if j else " ") + word)
    return pieces


def scripted_summary(request: str, keep: int = 5, words: int = 10) -> str:
    """What the scripted model answers to a compaction request: the user's latest requests
    (their first words) and how many tool calls were made — bounded, whatever the input."""
    asked, calls = [], 0
    for line in request.splitlines():
        if line.startswith("user: "):
            text = line[len("user: ") :]
            if not text.startswith("Summary of the conversation so far"):
                asked.append(" ".join(text.split()[:words]))
        if line.startswith("[calls] ") or "\n[calls] " in line:
            calls += line.count("(")
    recent = "; ".join(asked[-keep:]) or "nothing"
    return f"Earlier, the user asked: {recent}. Tool calls made: {calls}."


def _rounds(after: list[dict[str, Any]]) -> int:
    """The tool rounds answered since the script (the user's latest message)."""
    return sum(1 for m in after if m["role"] == "assistant" and m.get("tool_calls"))


def _structured(rest: str) -> StructuredOutput:
    try:
        return StructuredOutput(json.loads(rest))
    except json.JSONDecodeError as exc:
        raise ProviderError(f"json directive is not valid JSON: {exc.msg}.") from exc


def _usage(prompt_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": prompt_tokens, "output_tokens": output_tokens}


def _pace(rest: str, current: float) -> float:
    try:
        return max(0.0, float(rest.strip()))
    except ValueError:
        return current
