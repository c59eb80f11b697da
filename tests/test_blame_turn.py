"""Issue 46, point 12: blame names each run's turn as the chat counts turns (``turn``: the user
messages on the path up to the message, from 1), not only the message's internal place in the
path (``position``, which counts every message and part of a turn's several messages)."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from .conftest import run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_run_names_its_turn(api, sid):
    run_turn(api, sid, "write a.txt one\nsay first")
    run_turn(api, sid, "say nothing written")
    run_turn(api, sid, "write b.txt two\nsay third")
    first = api.get(f"/api/sessions/{sid}/blame/a.txt").json()
    third = api.get(f"/api/sessions/{sid}/blame/b.txt").json()
    assert [(r["start"], r["end"], r["turn"]) for r in first] == [(1, 1, 1)]
    assert [(r["start"], r["end"], r["turn"]) for r in third] == [(1, 1, 3)]
    # The message's place in the path is another number (several messages per turn).
    assert third[0]["position"] > third[0]["turn"]


def test_lines_from_before_the_session_have_no_turn(api):
    # The upload is the path's first message, shown in the chat as the first user message
    # ("Uploaded x.zip: …"): the turn after it is the second.
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("a.txt", "old\n")
    sid = api.post(
        "/api/sessions/upload/", {"file": SimpleUploadedFile("x.zip", data.getvalue())}
    ).json()["id"]
    run_turn(api, sid, "append a.txt new")
    runs = api.get(f"/api/sessions/{sid}/blame/a.txt").json()
    assert [(r["start"], r["turn"]) for r in runs] == [(1, None), (2, 2)]
