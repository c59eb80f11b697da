"""What every settings module reads the environment with: where the project is, and how a
boolean variable is read (docs/configuration.md: true when set to 1, true, yes or on, in any
case; false otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}
