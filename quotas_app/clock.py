"""The time every quota decision uses: one function, so tests move it (``mock.patch(
"quotas_app.clock.now", …)``) instead of sleeping to the end of a window."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    return timezone.now()
