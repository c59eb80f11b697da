"""Issue 16, tried as a user would: the deployment lists a model served by a server this
project did not write (fakellm), and the scripted one; in Chromium the user picks that model,
chats, has it call a tool, and sees the run's usage and cost."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.embedded_server import EmbeddedServer

from .stack import Processes
from .test_providers_external import _fakellm
from .ui import LAST_ASSISTANT_TEXT, files_on_disk, login, new_session, send, wait_idle

pytestmark = pytest.mark.timeout(180)

SCREENSHOT = Path(os.environ.get("MODELS_SCREENSHOT", "/tmp/models.png"))
MODELS = [
    {"name": "scripted"},
    {
        "name": "openai:gpt-4o-mini",
        "context_window": 128000,
        "price": {"input": 150000, "output": 600000},
    },
]


def test_a_user_picks_a_model_served_elsewhere_chats_calls_a_tool_and_sees_the_usage(page):
    tmp = Path(tempfile.mkdtemp(prefix="agentplat-models-"))
    procs = Processes()
    server = None
    try:
        fake = _fakellm(procs, tmp)
        server = EmbeddedServer(
            tmp, AGENT_MODELS=json.dumps(MODELS), OPENAI_BASE_URL=f"{fake}/v1"
        ).start()
        login(page, server)
        sid = new_session(page)
        picker = page.get_by_label("Model")
        page.wait_for_function("() => document.getElementById('model-picker').value !== ''")
        assert picker.input_value() == "scripted"
        with page.expect_response(lambda r: r.request.method == "PATCH") as patched:
            picker.select_option("openai:gpt-4o-mini")
        assert patched.value.ok
        send(page, "hello there")
        page.wait_for_function(
            f"() => ({LAST_ASSISTANT_TEXT})() === 'Hello from a server we did not write.'"
        )
        wait_idle(page)
        send(page, "please make the file")
        page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})() === 'The file is written.'")
        wait_idle(page)
        assert files_on_disk(server, sid)["made.txt"] == "made by a streamed tool call"
        usage = page.locator("#messages .usage").last.inner_text()
        assert "tokens in" in usage and "$" in usage, usage
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    except Exception:
        if server is not None:
            print(server.logs())
        print(procs.logs())
        raise
    finally:
        if server is not None:
            server.stop()
        procs.stop()
        shutil.rmtree(tmp, ignore_errors=True)
