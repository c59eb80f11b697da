"""Web and worker never run as root (docs/semantics.md §11.3; issue 24): the shipped deployment runs
them as an unprivileged user, and a services-mode process started as root refuses to start
unless the operator says ``ALLOW_ROOT=true``."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from config.privileges import refuse_root

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "platform"
GOOD_KEY = "k" * 50


def _unit(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string((PLATFORM / name).read_text())
    return parser["Service"]


@pytest.mark.parametrize("name", ["agentplat-web.service", "agentplat-worker.service"])
def test_the_units_run_as_the_agentplat_user(name):
    unit = _unit(name)
    assert unit["User"] == "agentplat"
    assert unit["Group"] == "agentplat"
    assert unit.get("ALLOW_ROOT") is None
    assert "ALLOW_ROOT" not in (PLATFORM / name).read_text()


def test_the_image_runs_as_an_unprivileged_user():
    lines = [line.split() for line in (PLATFORM / "Dockerfile").read_text().splitlines()]
    users = [words[1] for words in lines if words and words[0] == "USER"]
    assert users and users[-1] not in ("root", "0"), users


def test_the_compose_file_does_not_run_anything_of_ours_as_root():
    services = yaml.safe_load((PLATFORM / "compose.yaml").read_text())["services"]
    for name in ("web", "worker"):
        assert services[name].get("user") not in ("root", "0", "0:0")
        assert "ALLOW_ROOT" not in str(services[name].get("environment", {}))


def test_services_mode_refuses_root(settings):
    settings.ALLOW_ROOT = False
    with pytest.raises(ImproperlyConfigured, match="refuses to run as root"):
        refuse_root("worker", embedded=False, euid=0)
    refuse_root("worker", embedded=False, euid=1000)  # an unprivileged user starts


def test_allow_root_and_embedded_mode_only_warn(settings, caplog):
    settings.ALLOW_ROOT = True
    refuse_root("web", embedded=False, euid=0)
    settings.ALLOW_ROOT = False
    refuse_root("web", embedded=True, euid=0)
    assert caplog.text.count("runs as root") == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is seen only by a process run as root")
def test_the_web_process_started_as_root_stops_saying_why(tmp_path):
    env = {k: v for k, v in os.environ.items() if "PYTEST" not in k and k != "ALLOW_ROOT"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        REDIS_URL="redis://127.0.0.1:6379/0",
        SECRET_KEY=GOOD_KEY,
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import config.asgi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "The web process refuses to run as root" in proc.stderr, proc.stderr
