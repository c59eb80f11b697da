"""What the web process does before its first request (config/asgi.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings


def test_the_urlconf_and_its_views_are_imported_before_the_first_request() -> None:
    """Else the first request imports them (about 0.1 s of its answer, and objects made after
    the collector settled, core/heap.py)."""
    probe = (
        "import sys, config.asgi; "
        "print(' '.join(m for m in ('config.urls', 'runs_app.api.views', "
        "'sessions_app.api.views') if m in sys.modules))"
    )
    env = {**os.environ, "ALLOW_ROOT": "true"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["config.urls", "runs_app.api.views", "sessions_app.api.views"]
