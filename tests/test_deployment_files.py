"""The deployment files agree on what the benchmarks measured (docs/operations.md, "CPU
weights"; docs/benchmarks.md, "Streaming latency"): the web process (Daphne, every socket's
frames) gets ten times the worker's share of a busy CPU, in the systemd units and in the
compose file alike, and listens with a queue of 1024 connections not yet accepted."""

from __future__ import annotations

import configparser
import re
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


def test_every_web_start_listens_with_the_benchmarked_backlog() -> None:
    """Twisted's default listen queue (50, what ``-b``/``-p`` give) overflowed when 200 runs
    were asked for at once: the kernel dropped 171 connections and their requests failed
    (docs/operations.md, "Services mode")."""
    from bench.env import LISTEN_BACKLOG

    starts = {
        "Procfile": (PLATFORM / "Procfile").read_text(),
        "agentplat-web.service": _unit("agentplat-web.service")["ExecStart"],
        "compose.yaml": yaml.safe_load((PLATFORM / "compose.yaml").read_text())["services"]["web"][
            "command"
        ],
        "docs/operations.md": (PLATFORM.parent / "docs" / "operations.md").read_text(),
    }
    for name, text in starts.items():
        lines = [line for line in text.splitlines() if "daphne " in line and "config.asgi" in line]
        assert lines, name
        for line in lines:
            assert " -b " not in line and " -p " not in line, (name, line)
            backlog = re.search(r"-e tcp:port=\S+:backlog=(\d+) ", line)
            assert backlog and int(backlog.group(1)) == LISTEN_BACKLOG == 1024, (name, line)


def test_the_compose_file_of_several_hosts_gives_each_host_a_disk_of_its_own() -> None:
    """platform/compose.hosts.yaml (docs/operations.md, "Several worker hosts"): the web holds
    no worktree, each worker host has its own name and volume, all share one central store."""
    services = yaml.safe_load((PLATFORM / "compose.hosts.yaml").read_text())["services"]
    web = services["web"]["environment"]
    assert web["WORKSPACE_ROOT"] == "" and web["MIRROR_ROOT"]
    workers = {name: s for name, s in services.items() if name.startswith("worker")}
    assert len(workers) >= 2
    names = {s["environment"]["WORKER_HOST"] for s in workers.values()}
    disks = {s["volumes"][0].split(":")[0] for s in workers.values()}
    assert len(names) == len(disks) == len(workers)
    remotes = {s["environment"]["SNAPSHOT_REMOTE"] for s in [services["web"], *workers.values()]}
    assert len(remotes) == 1 and remotes.pop().startswith("ssh://")
    assert services["web"]["cpu_shares"] == 10 * next(iter(workers.values()))["cpu_shares"]
