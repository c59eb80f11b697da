"""Bad input is a 4xx in the contract's JSON shape, never a 500 (issue 12, item 9).

Targeted regressions first (deep JSON, over-long paths, a diff path outside the tree, a body
over the upload limit), then a sweep: every operation of the OpenAPI schema, with real ids,
gets deeply nested bodies, a body over the limit, very long path parameters and very long
query values. The property: no 5xx, and every 4xx under /api/ is ``{"error": {"type",
"message"}}`` as JSON."""

from __future__ import annotations

import contextlib
import json
from urllib.parse import urlencode

import pytest
from django.conf import settings as django_settings
from drf_spectacular.generators import SchemaGenerator

from api.guards import DEPTH_MESSAGE, MAX_JSON_DEPTH
from runs_app.tools import TOOLS, ToolContext, ToolError, resolve
from sessions_app.models import Part
from tests.conftest import client_for, run_turn
from workspace.worktree_files import parts_of, plain_relative

DEPTHS = (MAX_JSON_DEPTH + 1, 100, 500, 10_000)
HUGE = 3 * 1024 * 1024  # over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default)
LONG_VALUES = ("a" * 5_000, "b" * 200_000, "/".join(["é" * 130] * 40))
# Query names the views read without declaring them in the schema.
EXTRA_QUERY = ("file", "message_id", "tree", "all", "format", "limit", "before", "after")


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


def assert_json_error(response, what: str = "") -> None:  # noqa: ANN001
    status = response.status_code
    body = b"" if getattr(response, "streaming", False) else response.content
    assert status < 500, (what, status, body[:300])
    if status >= 400:
        kind = response.get("Content-Type", "")
        assert kind.startswith("application/json"), (what, status, kind, body[:300])
        error = json.loads(body)
        assert set(error) == {"error"}, (what, error)
        assert set(error["error"]) == {"type", "message"}, (what, error)
        assert isinstance(error["error"]["message"], str) and error["error"]["message"], error


@pytest.fixture
def world(db, transactional_db, owner):
    api = client_for(owner)
    sid = api.post("/api/sessions/", {"title": "bad input"}, format="json").json()["id"]
    run = run_turn(api, sid, "write a.txt x\nsay ok")
    token = api.post(f"/api/sessions/{sid}/share/").json()["token"]
    part = Part.objects.filter(message__session_id=sid).order_by("id").first()
    yield {
        "api": api,
        "session_id": sid,
        "run_id": run["id"],
        "token": token,
        "part_id": part.id,
        "path": "a.txt",
    }
    # Runs some requests started (continue, regenerate) end before the tables are flushed.
    from core.errors import AppError
    from runs_app.models import Run
    from runs_app.services.runs import cancel_run, wait_for_run

    for left in Run.objects.exclude(status__in=list(Run.TERMINAL)):
        with contextlib.suppress(AppError):
            cancel_run(run=left)
        wait_for_run(left, timeout=30)


# -- (a) deeply nested JSON ------------------------------------------------------------------


@pytest.mark.parametrize("depth", DEPTHS)
def test_it_refuses_deeply_nested_json_with_a_400(world, depth):
    api, sid = world["api"], world["session_id"]
    bodies = (
        deep_array(depth),
        deep_object(depth),
        '{"messages": ' + deep_array(depth - 1) + "}",
        '{"title": "t", "model": ' + deep_object(depth - 1) + "}",
    )
    for url in (f"/api/sessions/{sid}/runs/", "/api/sessions/"):
        for body in bodies:
            response = api.post(url, body, content_type="application/json")
            assert_json_error(response, url)
            assert response.status_code == 400
            assert response.json()["error"] == {"type": "ValidationError", "message": DEPTH_MESSAGE}


def test_json_nested_up_to_the_bound_is_parsed(world):
    api = world["api"]
    # The object itself is level 1; "extra" (ignored by the serializer) takes the rest.
    body = '{"title": "deep", "extra": ' + deep_array(MAX_JSON_DEPTH - 1) + "}"
    response = api.post("/api/sessions/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    # Brackets inside strings are text, not nesting.
    body = json.dumps({"title": "[" * 100 + '{"' * 40})
    assert api.post("/api/sessions/", body, content_type="application/json").status_code == 201


def test_a_nul_deep_in_a_body_is_still_refused(world):
    body = json.dumps({"title": "t", "extra": json.loads(deep_object(60, '"x\\u0000"'))})
    response = world["api"].post("/api/sessions/", body, content_type="application/json")
    assert response.status_code == 400
    assert "NUL" in response.json()["error"]["message"]


# -- (b) over-long paths ---------------------------------------------------------------------


def test_over_long_file_paths_are_a_400(world):
    api, sid = world["api"], world["session_id"]
    for path in (
        "a" * 5_000,
        "é" * 200,  # 400 bytes in one component
        "/".join(["c" * 200] * 20),  # every component fits, the path does not
        "/".join(["d" * 250] * 16),  # under 4,096 alone, over it under the worktree
    ):
        response = api.get(f"/api/sessions/{sid}/files/{path}")
        assert_json_error(response, path[:20])
        assert response.status_code == 400, (path[:20], response.content)
        assert response.json()["error"]["type"] == "ValidationError"
    response = api.get(f"/api/sessions/{sid}/files/{'e' * 255}/{'f' * 255}")
    assert response.status_code == 404, "long but possible names: not there"
    response = api.get(f"/api/sessions/{sid}/files/a.txt")
    assert b"".join(response.streaming_content) == b"x"


def test_the_shared_file_endpoint_answers_404_for_over_long_paths(world):
    api, token = world["api"], world["token"]
    for path in ("a" * 5_000, "b" * 200_000, "/".join(["c" * 300] * 20)):
        response = api.get(f"/api/shared/{token}/files/{path}")
        assert_json_error(response, path[:20])
        assert response.status_code == 404
    assert api.get(f"/api/shared/{token}/files/a.txt").content == b"x"


def test_worktree_paths_refuse_names_the_kernel_would_refuse(tmp_path):
    for relative in ("a" * 256, "é" * 128, "/".join(["b" * 200] * 21)):
        with pytest.raises(ValueError, match="longer than"):
            parts_of(tmp_path, relative)
    assert parts_of(tmp_path, "a" * 255) == ("a" * 255,)


def test_agent_tools_refuse_over_long_paths_with_a_tool_error(tmp_path):
    ctx = ToolContext(worktree=tmp_path, should_abort=lambda: False)
    for path in ("a" * 256, "é" * 128, "/".join(["b" * 200] * 21), "c/" * 2100 + "d"):
        with pytest.raises(ToolError, match="Invalid path"):
            resolve(tmp_path, path)
        for tool, args in (
            ("read", {"path": path}),
            ("write", {"path": path, "content": "x"}),
            ("append", {"path": path, "content": "x"}),
            ("delete", {"path": path}),
            ("list", {"path": path}),
        ):
            with pytest.raises(ToolError):
                TOOLS[tool].run(ctx, args)
    assert resolve(tmp_path, "a" * 255) == ("a" * 255,)


# -- (c) the diff of one file ----------------------------------------------------------------


def test_the_diff_of_one_file_refuses_paths_that_are_not_plain_relative(world):
    api, sid = world["api"], world["session_id"]
    for file in ("../x", "./a.txt", "a/../a.txt", "a//b", "/etc/passwd", "a/", "é" * 200):
        response = api.get(f"/api/sessions/{sid}/diff/?{urlencode({'file': file})}")
        assert_json_error(response, file)
        assert response.status_code == 400, (file, response.content)
        assert response.json()["error"]["type"] == "ValidationError"
    response = api.get(f"/api/sessions/{sid}/diff/?file=a.txt")
    assert response.status_code == 200 and "+x" in response.json()["patch"]


def test_plain_relative_takes_plain_relative_paths_only():
    assert plain_relative("a/b.txt") == "a/b.txt"
    assert plain_relative("ünï名/.hidden") == "ünï名/.hidden"
    for bad in ("", "/a", "a/", "a//b", ".", "a/./b", "..", "a/../b", "a\0b", "x" * 256):
        with pytest.raises(ValueError):
            plain_relative(bad)


# -- (d) bodies over the upload limit --------------------------------------------------------


def test_a_body_over_the_upload_limit_is_a_json_400(world):
    api, sid = world["api"], world["session_id"]
    body = json.dumps({"messages": [{"role": "user", "content": "x" * HUGE}]})
    response = api.post(f"/api/sessions/{sid}/runs/", body, content_type="application/json")
    assert_json_error(response)
    assert response.status_code == 400
    limit = f"{django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,}"
    assert response.json()["error"] == {
        "type": "ValidationError",
        "message": f"The request body is larger than the limit of {limit} bytes.",
    }
    # A form body is read by a middleware, before any DRF view: Django's handler400.
    response = api.post(f"/api/sessions/{sid}/runs/", {"x": "y" * HUGE})
    assert_json_error(response)
    assert response.status_code == 400 and limit in response.json()["error"]["message"]


def test_pages_keep_their_html_400(db):
    from django.test import Client

    response = Client().post("/login/", {"x": "y" * HUGE})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


# -- every operation, hostile inputs ---------------------------------------------------------


def _operations() -> list[tuple[str, str, dict]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (method.upper(), path, operation)
        for path, operations in sorted(schema["paths"].items())
        for method, operation in operations.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


OPERATIONS = _operations()


def _url(template: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


@pytest.mark.parametrize(
    ("method", "template", "operation"),
    OPERATIONS,
    ids=[f"{m} {p}" for m, p, _ in OPERATIONS],
)
def test_no_operation_answers_5xx_to_hostile_input(world, method, template, operation):
    api = world["api"]
    params = operation.get("parameters", [])
    in_path = [p["name"] for p in params if p["in"] == "path"]
    real = {name: str(world.get(name, "x")) for name in in_path}

    def send(url: str, body: str | None = None) -> None:
        if body is None:
            response = api.generic(method, url)
        else:
            response = api.generic(method, url, body, content_type="application/json")
        assert_json_error(response, f"{method} {url[:120]} body={(body or '')[:40]!r}")
        if getattr(response, "streaming", False):
            response.close()

    if method != "GET":
        bodies = [deep_array(d) for d in DEPTHS] + [deep_object(d) for d in DEPTHS]
        bodies += ['{"messages": ' + deep_array(d) + "}" for d in DEPTHS]
        bodies.append(json.dumps({"messages": [{"role": "user", "content": "x" * HUGE}]}))
        for body in bodies:
            send(_url(template, real), body)
    for name in in_path:
        for value in LONG_VALUES:
            send(_url(template, {**real, name: value}))
    queries = {p["name"] for p in params if p["in"] == "query"} | set(EXTRA_QUERY)
    for name in sorted(queries):
        for value in LONG_VALUES[:2]:
            send(_url(template, real) + "?" + urlencode({name: value}))


def test_the_sweep_covers_the_schema():
    paths = {p for _, p, _ in OPERATIONS}
    assert "/api/sessions/{session_id}/runs/" in paths and len(OPERATIONS) >= 30


def test_a_lone_surrogate_in_any_json_body_is_a_400_not_a_500(world):
    """PostgreSQL cannot store a lone surrogate: every JSON endpoint refuses it at the door
    (the same walk as the import's), instead of failing in the database."""
    api, sid = world["api"], world["session_id"]
    cases = (
        ("/api/sessions/", '{"title": "a\\ud800b"}'),
        (f"/api/sessions/{sid}/runs/", '{"messages": [{"role": "user", "content": "\\udfff"}]}'),
    )
    for url, body in cases:
        response = api.post(url, body, content_type="application/json")
        assert_json_error(response, url)
        assert response.status_code == 400
        assert "lone surrogates" in response.json()["error"]["message"]


def test_a_session_model_longer_than_its_column_is_a_400(world):
    """PATCH with a 5,000-character model passed the catalogue check and failed on save."""
    api, sid = world["api"], world["session_id"]
    for body in ({"model": "openai:" + "m" * 5000}, {"model": "x" * 5000}):
        response = api.patch(f"/api/sessions/{sid}/", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["type"] == "ValidationError"
    created = api.post("/api/sessions/", {"model": "openai:" + "m" * 5000}, format="json")
    assert created.status_code == 400, created.content


def test_a_database_gone_under_a_request_answers_503_in_the_error_shape(api, monkeypatch):
    """Found by the chaos test: a PostgreSQL backend killed under a request answered 500;
    nothing was committed and the client may try again: 503 with Retry-After."""
    from django.db import OperationalError

    from sessions_app.api import views

    def gone(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(views, "sessions_for_user", gone)
    answer = api.get("/api/sessions/")
    assert answer.status_code == 503 and answer["Retry-After"] == "1"
    assert answer.json()["error"]["type"] == "ServiceUnavailable"
