from __future__ import annotations

import pytest

from runs_app.providers.base import ProviderError, ReasoningDelta, TextDelta, ToolCall
from runs_app.providers.scripted import ScriptedProvider, parse
from sessions_app.models import Part
from tests.conftest import run_turn


@pytest.fixture(autouse=True)
def _no_pace(settings):
    settings.SCRIPTED_DEFAULT_PACE_MS = 0


def step(messages):
    return list(ScriptedProvider().stream(messages, [], should_abort=lambda: False))


def text_of(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events):
    return [e for e in events if isinstance(e, ToolCall)]


def answered(script, *rounds):
    """A transcript: the user's script, then one assistant tool round per entry of rounds."""
    messages = [{"role": "user", "content": script}]
    for i, names in enumerate(rounds):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{i}{j}", "type": "function", "function": {"name": n}}
                    for j, n in enumerate(names)
                ],
            }
        )
        for j, _ in enumerate(names):
            messages.append({"role": "tool", "tool_call_id": f"c{i}{j}", "content": "ok"})
    return messages


def test_it_echoes_text_without_directives():
    assert text_of(step([{"role": "user", "content": "hi there"}])) == "You said: hi there"


def test_it_streams_say_word_by_word():
    events = step([{"role": "user", "content": "say hello world"}])
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["hello", " world"]
    assert calls_of(events) == []


def test_it_emits_one_tool_batch_per_step_then_says_done():
    script = "say writing\nwrite notes/a.txt first line\nread notes/a.txt"
    first = step(answered(script))
    assert text_of(first) == "writing"
    calls = calls_of(first)
    assert [(c.name, c.arguments) for c in calls] == [
        ("write", {"path": "notes/a.txt", "content": "first line"}),
        ("read", {"path": "notes/a.txt"}),
    ]
    second = step(answered(script, ["write", "read"]))
    assert text_of(second) == "done"
    assert calls_of(second) == []


def test_a_text_line_after_tools_starts_the_next_step():
    script = "write a x\nsay between\ndelete a"
    assert [c.name for c in calls_of(step(answered(script)))] == ["write"]
    second = step(answered(script, ["write"]))
    assert text_of(second) == "between"
    assert [c.name for c in calls_of(second)] == ["delete"]
    third = step(answered(script, ["write"], ["delete"]))
    assert text_of(third) == "done"


def test_it_stops_without_done_when_the_last_step_had_no_tools():
    script = "write a x\nsay finished"
    assert text_of(step(answered(script, ["write"]))) == "finished"


def test_think_is_reasoning_and_fail_raises():
    events = step([{"role": "user", "content": "think hmm ok\nsay yes"}])
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "hmm ok"
    with pytest.raises(ProviderError, match="boom now"):
        step([{"role": "user", "content": "say a\nfail boom now"}])


def test_write_keeps_the_exact_text_and_append_gets_its_arguments():
    segments = parse("write f.txt two  spaces \nappend g.txt line")
    assert segments[0].tools == [("write", "f.txt two  spaces "), ("append", "g.txt line")]
    call = calls_of(step([{"role": "user", "content": "write f.txt two  spaces "}]))[0]
    assert call.arguments == {"path": "f.txt", "content": "two  spaces "}


def test_it_reads_only_the_latest_user_message():
    messages = answered("write a x", ["write"]) + [
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "say again"},
    ]
    assert text_of(step(messages)) == "again"


def test_backslash_n_in_say_is_a_line_break_streamed_word_by_word():
    events = step([{"role": "user", "content": r"say Two items:\n\n- one\n- two"}])
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["Two", " items:", "\n", "\n-", " one", "\n-", " two"]
    assert "".join(deltas) == "Two items:\n\n- one\n- two"


def test_backslash_n_in_think_is_a_line_break():
    events = step([{"role": "user", "content": r"think a\nb"}])
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "a\nb"


@pytest.mark.django_db(transaction=True)
def test_a_scripted_code_block_is_stored_with_its_line_breaks(api, sid):
    script = r"say Here:\n```python\nx  = 1\nprint(x)\n```\n- a\n- b"
    run = run_turn(api, sid, script)
    text = Part.objects.get(message__run_id=run["id"], message__role="assistant", type="text")
    assert text.text == "Here:\n```python\nx  = 1\nprint(x)\n```\n- a\n- b"
