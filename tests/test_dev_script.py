"""``./dev``: the slow first run says what it is doing, a set-up checkout stays quiet, and
``PORT`` / ``BIND`` choose where ``./dev serve`` listens (issue 17, item 3).

The real script runs in a throwaway directory whose ``python`` (``PYTHON``) and venv tools are
stand-ins that record their arguments: the script's own steps, messages and choices are what
is tested, without a minute of installing or a server."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `python -m venv .venv` makes a venv whose tools only record how they were called.
STAND_IN = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  for tool in python pip pytest daphne; do cp "$0" "$3/bin/$tool"; done
fi
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copy2(ROOT / "dev", tmp_path / "dev")
    (tmp_path / "pyproject.toml").write_text("")
    python = tmp_path / "python3"
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def dev(checkout: Path, *args: str, **env: str) -> str:
    result = subprocess.run(
        ["bash", str(checkout / "dev"), *args],
        env={
            "PATH": os.environ["PATH"],
            "PYTHON": str(checkout / "python3"),
            "CALLS": str(checkout / "calls.log"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def calls(checkout: Path) -> list[str]:
    return (checkout / "calls.log").read_text().splitlines()


def test_the_first_serve_says_each_slow_step_before_serving(checkout):
    out = dev(checkout, "serve")
    assert out.splitlines() == [
        "Setting up the virtualenv (first run, about a minute)…",
        "Installing dependencies…",
        "Migrating the database…",
        "Creating the demo user…",
        "Serving embedded mode at http://127.0.0.1:8000/  (admin: /admin/, API docs: /api/docs/)",
    ]
    assert calls(checkout)[-1] == "daphne -b 127.0.0.1 -p 8000 config.asgi:application"


def test_a_set_up_checkout_skips_the_venv_steps_and_its_tests_print_nothing_of_them(checkout):
    dev(checkout, "serve")
    again = dev(checkout, "serve")
    assert "virtualenv" not in again and "Installing" not in again
    assert again.startswith("Migrating the database…\n")
    assert dev(checkout, "test", "tests/test_x.py") == ""
    assert calls(checkout)[-1] == "pytest tests/test_x.py"


def test_port_and_bind_choose_where_it_listens(checkout):
    out = dev(checkout, "serve", PORT="8123", BIND="0.0.0.0")
    assert "Serving embedded mode at http://127.0.0.1:8123/" in out
    assert calls(checkout)[-1] == "daphne -b 0.0.0.0 -p 8123 config.asgi:application"
    out = dev(checkout, "serve", PORT="9000", BIND="192.0.2.10")
    assert "Serving embedded mode at http://192.0.2.10:9000/" in out
