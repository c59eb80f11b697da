"""The shell tool on, in its sandbox, for a test: skipped where bubblewrap is missing (outside
CI, which installs it) or the host cannot make a sandbox."""

from __future__ import annotations

import os
import shutil

import pytest

from workspace import sandbox


def shell_on(settings) -> None:  # noqa: ANN001 - pytest-django's settings fixture
    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    if shutil.which("bwrap") is None and not os.environ.get("REQUIRE_BROWSER"):
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    reason = sandbox.unavailable_reason()
    if "cannot create a sandbox" in reason:
        pytest.skip(reason)
    assert reason == "", reason
