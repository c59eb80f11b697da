"""The deployment files agree on what the benchmarks measured (docs/operations.md, "CPU
weights"; docs/benchmarks.md, "Streaming latency"): the web process (Daphne, every socket's
frames) gets ten times the worker's share of a busy CPU, in the systemd units and in the
compose file alike."""

from __future__ import annotations

import configparser
from pathlib import Path

import yaml

PLATFORM = Path(__file__).resolve().parents[1] / "platform"


def _unit(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string((PLATFORM / name).read_text())
    return parser["Service"]


def test_the_web_unit_weighs_ten_times_the_worker_unit() -> None:
    web, worker = _unit("agentplat-web.service"), _unit("agentplat-worker.service")
    assert int(web["CPUWeight"]) == 10 * int(worker["CPUWeight"])


def test_the_compose_file_weighs_web_as_the_units_do() -> None:
    services = yaml.safe_load((PLATFORM / "compose.yaml").read_text())["services"]
    assert services["web"]["cpu_shares"] == 10 * services["worker"]["cpu_shares"]
