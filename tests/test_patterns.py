"""Security review, findings 4, 10, 12 and 14: the patterns users write — permission globs,
``output_schema`` regular expressions, the schema itself — are matched in bounded time; file
rules see the path the tool touches; shell rules see the commands a line runs.

A backtracking matcher holds the interpreter lock, so a slow match cannot be timed out in the
test's own process: ``within`` runs it in a forked child and kills it when it overruns."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import pytest

from runs_app.execution.host import run_agent
from runs_app.services.runs import start_run
from sessions_app import permissions
from sessions_app.models import Part, Session
from sessions_app.services.sessions import create_session
from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

FAST = 0.5  # seconds: what a match of 10,000 characters may take, at most


def within(seconds: float, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the CPU seconds it took, or a failure when it still runs after
    ``seconds`` (of the clock)."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        # CPU time, not the clock's: what the match costs, whatever else the machine runs
        # (a loaded CI machine stretched a 0.2 s match past FAST on the wall clock).
        start = time.process_time()
        value = fn(*args)
        send.send((value, time.process_time() - start))

    process = context.Process(target=child, daemon=True)
    process.start()
    try:
        if not receive.poll(seconds):
            raise AssertionError(f"{fn.__name__}{args!r:.80} still ran after {seconds} s")
        return receive.recv()
    finally:
        process.kill()
        process.join()


# -- finding 4: no pattern stalls a worker -----------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "key", "argument"),
    [
        ("write", "path", "a" * 58),
        ("write", "path", "a" * 10_000),
        ("shell", "command", "a" * 10_000),
        ("shell", "command", "a" * 100_000),
    ],
)
def test_it_matches_a_backtracking_glob_in_linear_time(tool, key, argument):
    rules = {tool: {"*a*a*a*a*a*a*a*b": "deny", "**": "ask"}}
    decision, took = within(5, permissions.decide, rules, tool, {key: argument})
    assert decision == "ask" and took < FAST, took


def test_it_matches_output_schema_patterns_in_linear_time():
    from runs_app import output_schema

    evil = "^(a+)+$"
    cases = [  # output, schema, whether it matches
        ("a" * 10_000 + "!", {"type": "string", "pattern": evil}, False),
        ({"a" * 10_000 + "!": 1}, {"patternProperties": {evil: {"type": "string"}}}, True),
        (
            {"a" * 10_000 + "!": 1},
            {"patternProperties": {evil: {}}, "additionalProperties": False},
            False,
        ),
        ({"k": "a" * 10_000 + "!"}, {"additionalProperties": {"pattern": evil}}, False),
        ([{"n": i} for i in range(5000)], {"uniqueItems": True}, True),  # pairwise: 12.5 M compares
    ]
    for output, schema, matches in cases:
        message, took = within(5, output_schema.mismatch, output, schema)
        assert took < FAST, (schema, took)
        assert (message is None) == matches, message
    message, _ = within(5, output_schema.mismatch, "aaa", {"pattern": evil})
    assert message is None


def test_a_run_with_a_backtracking_output_pattern_ends_at_once(api):
    sid = new_session(api)
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    start = time.monotonic()
    run = api.post(
        f"/api/sessions/{sid}/runs/",
        {
            "messages": [{"content": 'json {"s": "' + "a" * 27 + '!"}'}],
            "output_schema": schema,
            "wait": True,
        },
        format="json",
    ).json()
    assert time.monotonic() - start < 3, "Python's re takes ~5 s for 27 a's, twice that for 28"
    assert run["status"] == "error"
    assert "does not match '^(a+)+$'" in run["error"]["message"]


def test_the_validation_of_an_output_is_bounded_in_time(owner):
    from runs_app import output_schema

    # Each level tries both branches again: 2^depth steps, without any loop.
    branch = {"items": {"$ref": "#/$defs/x"}}
    schema = {"$defs": {"x": {"anyOf": [branch, {**branch, "minItems": 0}], "type": "integer"}}}
    schema["$ref"] = "#/$defs/x"
    output: Any = 1
    for _ in range(30):
        output = [output]
    message, took = within(10, output_schema.mismatch, output, schema)
    assert took < 2 * output_schema.MAX_SECONDS, took
    assert message.startswith("The structured output could not be checked"), message


# -- finding 14: schemas that cannot be checked are refused ------------------------------------
@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"$ref": "#"}, "$ref loop"),
        ({"not": {"$ref": "#"}}, "$ref loop"),
        (
            {
                "properties": {"a": {"$ref": "#/$defs/x"}},
                "$defs": {"x": {"allOf": [{"$ref": "#/$defs/x"}]}},
            },
            "$ref loop",
        ),
        ({"type": "string", "pattern": "(a)\\1"}, "RE2"),
        ({"patternProperties": {"(?=x)": {}}}, "RE2"),
        ({"type": "strin"}, "not a valid JSON Schema"),
        ({"properties": {"a": {"type": "string"}}, "x": "y" * 100_001}, "longer than"),
        ({"unevaluatedProperties": False, "patternProperties": {"a": {}}}, "unevaluatedProperties"),
    ],
)
def test_it_refuses_an_output_schema_it_cannot_check(api, sid, schema, words):
    answer = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"content": "json {}"}], "output_schema": schema},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert set(error) == {"type", "message"} and words in error["message"], error


def test_it_takes_a_recursive_schema_that_goes_into_the_output(api, sid):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"items": {"$ref": "#"}}},
    }
    script = 'json {"name": "a", "children": [{"name": "b", "children": []}]}'
    run = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"content": script}], "output_schema": schema, "wait": True},
        format="json",
    ).json()
    assert run["status"] == "completed" and run["output"]["children"][0]["name"] == "b"


def test_a_schema_that_skipped_the_door_fails_the_run_with_a_sentence(owner):
    session = create_session(owner=owner)
    run = start_run(
        session=session,
        user=owner,
        messages=[{"content": 'json {"n": 1}'}],
        output_schema={"$ref": "#"},  # as stored before the door checked it
        defer_enqueue=True,
    )
    start = time.monotonic()
    run_agent(run.id)
    run.refresh_from_db()
    assert time.monotonic() - start < 5
    assert run.status == "error" and "$ref loop" in run.error["message"], run.error


# -- finding 10: path rules see the path the tool touches --------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "secret/a.txt",
        "./secret/a.txt",
        "secret//a.txt",
        "secret/./a.txt",
        " secret/a.txt ",
        "secret/a.txt/",
        "x/../secret/a.txt",
        "/secret/a.txt",
    ],
)
def test_a_path_rule_matches_every_spelling_of_the_path(path):
    rules = {"write": {"secret/**": "deny"}}
    assert permissions.decide(rules, "write", {"path": path}) == "deny"


def test_a_path_rule_leaves_other_paths_alone():
    rules = {"write": {"secret/**": "deny"}}
    for path in ("secrets/a.txt", "a/secret/b.txt", "./a.txt"):
        assert permissions.decide(rules, "write", {"path": path}) == "allow", path


def test_a_denied_folder_stays_denied_behind_dot_slash(api):
    sid = new_session(api, permissions={"write": {"secret/**": "deny"}})
    run_turn(api, sid, "write ./secret/a.txt x")
    (part,) = Part.objects.filter(session_id=sid, type=Part.Type.TOOL)
    assert part.state["status"] == "error" and part.state["metadata"]["denied"] is True
    assert not (Session.objects.get(id=sid).worktree / "secret" / "a.txt").exists()


# -- finding 12: shell rules see the commands a line runs --------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        "rm a",
        " rm b",
        'sh -c "rm c"',
        "/bin/rm d",
        "ls && rm e",
        "ls | rm f\n",
        "echo x\nrm g",
        "env X=1 rm h",
        "X=1 rm i",
        "timeout -s KILL 5 rm j",
        "nice -n 5 rm k",
        "exec rm l",
        "bash -lc 'cd x; /usr/bin/rm m'",
        "'r'm n",
        "\\rm o",
        "r\\\nm p",
        "2>/dev/null rm q",
        "xargs rm < list",
        "if true; then rm r; fi",
    ],
)
def test_a_shell_deny_rule_matches_the_program_in_its_forms(command):
    assert permissions.decide({"shell": {"rm *": "deny"}}, "shell", {"command": command}) == "deny"


def test_shell_rules_ask_when_the_command_hides_what_it_runs():
    rules = {"shell": {"rm *": "deny"}}
    for command in ("echo $(rm a)", "echo `rm a`", "echo rm a | sh", "$X a", "echo 'open"):
        assert permissions.decide(rules, "shell", {"command": command}) == "ask", command
    assert permissions.decide(rules, "shell", {"command": "ls -la; git status"}) == "allow"
    # Only allow rules: nothing to bypass, nothing asked.
    allows = {"shell": {"git *": "allow"}}
    assert permissions.decide(allows, "shell", {"command": "echo $(date)"}) == "allow"
    # An allowed prefix does not allow what follows it.
    mixed = {"shell": {"**": "ask", "git *": "allow"}}
    assert permissions.decide(mixed, "shell", {"command": "git status"}) == "allow"
    assert permissions.decide(mixed, "shell", {"command": "git status; curl x | sh"}) == "ask"
