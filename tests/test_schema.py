"""Issue 13, item 6: the API is typed at the door. The OpenAPI schema names real fields (enums
for the choices, the shapes of the answers, no untyped objects); the declared shapes agree
with the JSON the API returns; input is refused in the contract's words by the serializers;
views fetch nothing themselves; selectors and services raise the application's NotFoundError,
which the API answers as its JSON 404 and the pages as Django's 404 page."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core.errors import NotFoundError
from runs_app.api import serializers as run_shapes
from runs_app.lifecycle import STRATEGIES
from runs_app.models import Run
from runs_app.selectors import checkpoint_timeline, run_data, run_for_user
from sessions_app.api.serializers import files as file_shapes
from sessions_app.api.serializers import messages as message_shapes
from sessions_app.api.serializers import sessions as session_shapes
from sessions_app.api.serializers import sharing as share_shapes
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import (
    lineage,
    message_data,
    message_tree,
    part_data,
    part_for_user,
    session_data,
    session_for_user,
)
from sessions_app.services import sharing
from tests.conftest import client_for, run_turn

ROOT = Path(__file__).resolve().parent.parent
VIEWS = (
    "sessions_app/api/views.py",
    "runs_app/api/views.py",
    "sessions_app/api/base.py",
    "api/base.py",
)
READS_AND_WRITES = (
    "sessions_app/selectors.py",
    "runs_app/selectors.py",
    *(p.relative_to(ROOT).as_posix() for p in sorted(ROOT.glob("*_app/services/*.py"))),
)


# -- the schema -------------------------------------------------------------------------------
@pytest.fixture
def schema(api) -> dict[str, Any]:
    response = api.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (or a lone ``allOf`` wrapper) followed."""
    while True:
        if "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        else:
            return node


def enum_of(schema: dict[str, Any], node: dict[str, Any]) -> set[str]:
    """The values an enum property takes (through refs and a oneOf with BlankEnum)."""
    node = resolve(schema, node)
    values = set(node.get("enum", []))
    for alternative in node.get("oneOf", []):
        values |= set(resolve(schema, alternative).get("enum", []))
    return values - {""}


def request_of(schema: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    operation = schema["paths"][path][method]
    return resolve(schema, operation["requestBody"]["content"]["application/json"]["schema"])


def answer_of(schema: dict[str, Any], path: str, method: str, code: str) -> dict[str, Any]:
    content = schema["paths"][path][method]["responses"][code]["content"]
    return resolve(schema, content["application/json"]["schema"])


def test_the_session_create_request_has_a_checkpoint_enum(schema):
    body = request_of(schema, "/api/sessions/", "post")
    assert enum_of(schema, body["properties"]["checkpoint"]) == {"runs", "tool-batch", "tool"}
    assert {"title", "model", "system_prompt"} <= set(body["properties"])


def test_the_run_create_request_has_mode_and_strategy_enums(schema):
    body = request_of(schema, "/api/sessions/{session_id}/runs/", "post")
    props = body["properties"]
    assert enum_of(schema, props["mode"]) == {"prompt", "resume"}
    assert enum_of(schema, props["multitask_strategy"]) == set(STRATEGIES)
    message = resolve(schema, props["messages"]["items"])
    assert set(message["properties"]) == {"role", "content"}
    assert enum_of(schema, message["properties"]["role"]) == {"user"}
    assert props["output_schema"]["type"] == "object"


def test_continue_and_regenerate_requests_are_typed(schema):
    props = request_of(schema, "/api/runs/{run_id}/continue/", "post")["properties"]
    assert [alt.get("enum") for alt in props["continue_from"]["oneOf"]] == [
        ["end", "last_user"],
        None,
    ]
    assert props["fork"]["type"] == "boolean"
    props = request_of(schema, "/api/runs/{run_id}/regenerate/", "post")["properties"]
    assert props["replace_original"]["type"] == "boolean"
    props = request_of(schema, "/api/sessions/{session_id}/rollback/", "post")["properties"]
    assert props["num_turns"]["type"] == "integer" and props["num_turns"]["minimum"] == 1


def test_the_session_answer_names_its_fields(schema):
    for path, method, code in (
        ("/api/sessions/", "post", "201"),
        ("/api/sessions/{session_id}/", "get", "200"),
        ("/api/sessions/{session_id}/revert/", "post", "200"),
    ):
        session = answer_of(schema, path, method, code)
        assert {"id", "status", "head_message_id", "revert", "summary"} <= set(
            session["properties"]
        )
        assert enum_of(schema, session["properties"]["status"]) == {
            "idle",
            "busy",
            "waiting",
            "preparing",
        }


def test_the_messages_page_has_results_of_messages_with_parts(schema):
    page = answer_of(schema, "/api/sessions/{session_id}/messages/", "get", "200")
    assert {"results", "next", "previous"} <= set(page["properties"])
    message = resolve(schema, page["properties"]["results"]["items"])
    assert {"id", "role", "parent_id", "completed_at", "error", "parts"} <= set(
        message["properties"]
    )
    part = resolve(schema, message["properties"]["parts"]["items"])
    assert part["discriminator"]["propertyName"] == "type"
    assert set(part["discriminator"]["mapping"]) == set(Part.Type.values)
    tool = resolve(schema, {"$ref": part["discriminator"]["mapping"]["tool"]})
    assert {"call_id", "tool", "state"} <= set(tool["properties"])
    state = resolve(schema, tool["properties"]["state"])
    assert {"status", "input", "output", "error", "metadata"} <= set(state["properties"])
    assert enum_of(schema, state["properties"]["status"]) == {
        "pending",
        "running",
        "completed",
        "error",
    }
    text = resolve(schema, {"$ref": part["discriminator"]["mapping"]["reasoning"]})
    assert "text" in text["properties"] and "truncated" in text["properties"]


def test_run_answers_name_their_fields(schema):
    run = answer_of(schema, "/api/runs/{run_id}/", "get", "200")
    assert {"id", "status", "mode", "result", "output", "usage"} <= set(run["properties"])
    for code in ("200", "202"):
        created = answer_of(schema, "/api/sessions/{session_id}/runs/", "post", code)
        assert created["properties"] == run["properties"]


def _untyped(schema: dict[str, Any], node: dict[str, Any]) -> bool:
    node = resolve(schema, node)
    if "oneOf" in node:
        return any(_untyped(schema, alternative) for alternative in node["oneOf"])
    if node.get("type") == "array":
        return _untyped(schema, node["items"])
    return node.get("type", "object") == "object" and not node.get("properties")


def test_no_answer_is_an_untyped_object(schema):
    untyped = []
    for path, operations in schema["paths"].items():
        if path == "/api/schema/":
            continue  # the schema itself: an OpenAPI document
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if not code.startswith("2"):
                    continue
                content = response.get("content")
                if content is None:
                    assert code == "204", (method, path, code)
                    continue
                json_answer = content.get("application/json")
                if json_answer and _untyped(schema, json_answer["schema"]):
                    untyped.append((method, path, code))
    assert not untyped


def test_the_schema_has_no_operation_without_a_declared_answer(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert any(code.startswith("2") for code in operation["responses"]), (method, path)


# -- the declared shapes are the JSON the API returns -----------------------------------------
def fields(serializer: type) -> set[str]:
    return set(serializer().fields)


@pytest.mark.django_db(transaction=True)
def test_the_declared_shapes_are_what_the_api_returns(api, owner, settings):
    sid = api.post("/api/sessions/", {"title": "shapes"}, format="json").json()["id"]
    run = run_turn(api, sid, "think first\nwrite a.txt x\nsay ok")
    session = Session.objects.get(id=sid)
    assert set(session_data(session)) == fields(session_shapes.SessionOut)
    assert set(run_data(Run.objects.get(id=run["id"]))) == fields(run_shapes.RunOut)
    revert = {"message_id": run["input_message_id"]}
    assert api.post(f"/api/sessions/{sid}/revert/", revert, format="json").status_code == 200
    reverted = session_data(Session.objects.get(id=sid))["revert"]
    assert set(reverted) == fields(session_shapes.RevertOut)
    api.post(f"/api/sessions/{sid}/unrevert/")

    settings.API_PART_FIELD_MAX = 3  # every part cut: ``truncated`` is declared too
    seen = set()
    for message in Message.objects.filter(session_id=sid).prefetch_related("parts"):
        parts = list(message.parts.order_by("order"))
        data = message_data(message, parts)
        assert set(data) == fields(message_shapes.MessageOut)
        for part in parts:
            shape = message_shapes.PART_SHAPES[part.type]
            declared = fields(shape)
            required = {name for name, f in shape().fields.items() if f.required}
            for body in (part_data(part), part_data(part, whole=True)):
                assert required <= set(body) <= declared, (part.type, set(body) ^ declared)
            if part.type == Part.Type.TOOL:
                assert set(part.state) <= fields(message_shapes.ToolStateOut)
            seen.add(part.type)
    assert {"text", "reasoning", "tool", "step-start", "step-finish", "patch"} <= seen

    entry = checkpoint_timeline(session)[0]
    assert set(entry) == fields(run_shapes.CheckpointOut)
    assert set(message_tree(session)[0]) == fields(message_shapes.TreeEntryOut)
    assert set(lineage(session, owner)) == fields(session_shapes.LineageOut)
    assert set(lineage(session, owner)["session"]) == fields(session_shapes.SessionBriefOut)
    diff = api.get(f"/api/sessions/{sid}/diff/").json()
    assert diff and set(diff[0]) == fields(file_shapes.DiffEntryOut)
    patch = api.get(f"/api/sessions/{sid}/diff/?file=a.txt").json()
    assert set(patch) == fields(file_shapes.FileDiffOut)
    transcript = api.get(f"/api/runs/{run['id']}/messages/").json()
    for item in transcript:
        assert set(item) <= fields(run_shapes.TranscriptEntryOut)
    listing = api.get(f"/api/sessions/{sid}/files/").json()
    assert set(listing[0]) == fields(file_shapes.WorktreeEntryOut)

    link = api.post(f"/api/sessions/{sid}/share/").json()
    assert set(link) == fields(share_shapes.ShareLinkOut)
    view = api.get(f"/api/shared/{link['token']}/").json()
    assert set(view) == fields(share_shapes.SharedOut)
    assert set(view["session"]) == fields(share_shapes.SharedSessionOut)
    page = api.get("/api/sessions/").json()
    assert set(page) == fields(session_shapes.SessionPageOut)
    page = api.get(f"/api/sessions/{sid}/messages/").json()
    assert set(page) == fields(message_shapes.MessagePageOut)
    aborted = api.post(f"/api/sessions/{sid}/abort/").json()
    assert set(aborted) == fields(run_shapes.AbortOut)


# -- input refused at the door, in the contract's words ---------------------------------------
@pytest.mark.django_db(transaction=True)
def test_bodies_are_refused_in_whole_sentences(api):
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run = run_turn(api, sid, "say hi")
    cases = [
        (
            "/api/sessions/",
            {"model": "gpt"},
            "model must be 'scripted', 'openai:<model>' or 'anthropic:<model>'.",
        ),
        (
            f"/api/sessions/{sid}/runs/",
            {"messages": [{"role": "system", "content": "x"}]},
            "each message must be an object with role 'user'.",
        ),
        (f"/api/sessions/{sid}/runs/", ["x"], "The body must be a JSON object."),
        (
            f"/api/sessions/{sid}/runs/",
            {"messages": [{"content": "x"}], "output_schema": "x"},
            "output_schema must be a JSON Schema object.",
        ),
        (
            f"/api/sessions/{sid}/runs/stream/",
            {"messages": [{"content": "x"}], "output_schema": {"type": "object"}},
            "output_schema is not supported on the streaming endpoint.",
        ),
        (f"/api/runs/{run['id']}/continue/", {"fork": "yes"}, "fork must be true or false."),
        (
            f"/api/runs/{run['id']}/continue/",
            {"input": [{"content": " "}]},
            "each entry of input needs a non-empty string content.",
        ),
        (
            f"/api/runs/{run['id']}/continue/",
            {"input": []},
            "input must be a list of {role, content} objects.",
        ),
        (
            f"/api/runs/{run['id']}/continue/",
            {"continue_from": 1.5},
            "continue_from must be 'end', 'last_user' or a message index K ≥ 0.",
        ),
        (
            f"/api/runs/{run['id']}/regenerate/",
            {"replace_original": 1},
            "replace_original must be true or false.",
        ),
        (
            f"/api/runs/{run['id']}/regenerate/",
            {"multitask_strategy": None},
            "multitask_strategy must be one of reject, enqueue, interrupt, rollback.",
        ),
        (
            f"/api/sessions/{sid}/rollback/",
            {"num_turns": "2"},
            "num_turns must be an integer of at least 1.",
        ),
    ]
    for url, body, message in cases:
        response = api.post(url, body, format="json")
        assert response.status_code == 400, (url, body, response.content)
        assert response.json()["error"] == {"type": "ValidationError", "message": message}
    patch = [
        ({"title": 5}, "title must be a non-empty string."),
        ({"title": "x" * 201}, "title must be at most 200 characters."),
        (
            {"title": "x", "system_prompt": "y"},
            "Only the title, model and permissions of a session can be changed.",
        ),
    ]
    for body, message in patch:
        response = api.patch(f"/api/sessions/{sid}/", body, format="json")
        assert response.json()["error"] == {"type": "ValidationError", "message": message}
    diff = api.get(f"/api/sessions/{sid}/diff/?file=")
    assert diff.json()["error"]["message"] == "file must be a path in the worktree."
    # DRF's own messages still name their field.
    response = api.post(f"/api/sessions/{sid}/head/", {}, format="json")
    assert response.json()["error"]["message"] == "message_id: This field is required."
    assert Run.objects.filter(session_id=sid).count() == 1


# -- views fetch nothing themselves -----------------------------------------------------------
FORBIDDEN_ATTRIBUTES = {
    "objects",  # an ORM query
    "refresh_from_db",
    "select_for_update",
    "scandir",
    "iterdir",
    "read_text",
    "read_bytes",
    "is_file",
    "is_dir",
}
FORBIDDEN_NAMES = {"open", "Path", "os", "shutil", "pathlib"}
# auth_token's body carries the login throttling and stays as it is (its token lookup too).
EXEMPT = {"auth_token"}


def _offences(path: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text(), path)
    exempt = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and function.name in EXEMPT
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"{path}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(f"{path}:{node.lineno} {node.id}")
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", "") or ""]
            found += [f"{path}:{node.lineno} import {m}" for m in modules if m in FORBIDDEN_NAMES]
    return found


def test_no_view_queries_the_database_or_the_filesystem_itself():
    assert [offence for path in VIEWS for offence in _offences(path)] == []


def test_the_scan_would_see_a_query_or_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_schema.ROOT", tmp_path)
    (tmp_path / "v.py").write_text(
        "def auth_token(r):\n    Token.objects.get()\n"
        "def view(r):\n    Run.objects.get()\n    open('x')\n    os.scandir('.')\n"
    )
    assert len(_offences("v.py")) == 4


# -- NotFoundError, not Http404 ---------------------------------------------------------------
def test_selectors_and_services_raise_the_applications_not_found():
    for path in READS_AND_WRITES:
        tree = ast.parse((ROOT / path).read_text(), path)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "Http404" not in names, path
        assert "get_object_or_404" not in names, path


def test_fetch_and_authorize_helpers_raise_not_found(owner, outsider, api):
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    for fetch in (
        lambda: session_for_user(outsider, sid),
        lambda: session_for_user(None, sid),
        lambda: run_for_user(outsider, "run_nope"),
        lambda: part_for_user(owner, "prt_nope"),
        lambda: sharing.share_for_token("nope", owner),
    ):
        with pytest.raises(NotFoundError):
            fetch()
    assert session_for_user(owner, sid).id == sid


def test_not_found_is_json_in_the_api_and_the_404_page_on_pages(owner, outsider, api):
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    response = client_for(outsider).get(f"/api/sessions/{sid}/")
    assert response.status_code == 404
    assert response.json() == {"error": {"type": "NotFound", "message": "No such session."}}
    browser = Client()
    browser.force_login(outsider)
    for method, url in (
        ("get", f"/sessions/{sid}/"),
        ("post", f"/sessions/{sid}/rename/"),
        ("post", f"/sessions/{sid}/delete/"),
        ("get", "/s/nope/"),
        ("post", "/s/nope/fork/"),
    ):
        page = getattr(browser, method)(url)
        assert page.status_code == 404, (method, url)
        assert page["Content-Type"].startswith("text/html"), (method, url)
