"""The structure picture of the code: the apps' packages as boxes, imports as arrows.

    .venv/bin/python -m scripts.structure                 # apps as boxes, DOT on stdout
    .venv/bin/python -m scripts.structure --level modules --png docs/structure-modules.png

Modules are grouped by package (``sessions_app.services.revert`` → ``sessions_app.services``);
an arrow means some module of one group imports some module of the other, counted from every
import statement (function-level ones too). tests/test_structure.py checks the same graph:
no arrow from ``sessions_app`` into ``runs_app``, and no cycle between modules.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import grimp

from scripts.architecture import PACKAGES  # the one list of the project's packages

ROOT = Path(__file__).resolve().parents[1]
GROUPS = (
    "sessions_app.api",
    "sessions_app.services",
    "sessions_app.management",
    "runs_app.api",
    "runs_app.services",
    "runs_app.providers",
    "runs_app.management",
)


def group(module: str, level: str = "modules") -> str:
    if level == "apps":
        return module.split(".")[0]
    for name in GROUPS:
        if module == name or module.startswith(name + "."):
            return name
    return module.split(".")[0] if module.count(".") == 0 else module


def edges(level: str = "modules") -> dict[tuple[str, str], int]:
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES)
    counted: dict[tuple[str, str], int] = {}
    for module in graph.modules:
        if ".migrations" in module:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = group(module, level), group(imported, level)
            if a != b and ".migrations" not in imported:
                counted[(a, b)] = counted.get((a, b), 0) + 1
    return counted


def dot(level: str = "modules") -> str:
    counted = edges(level)
    nodes = sorted({n for pair in counted for n in pair})
    lines = [
        "digraph structure {",
        '  rankdir=BT; node [shape=box, fontname="Helvetica", fontsize=10];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    if level == "apps":
        for (a, b), n in sorted(counted.items()):
            lines.append(f'  "{a}" -> "{b}" [label=" {n} imports", fontsize=9];')
        lines.append("}")
        return "\n".join(lines) + "\n"
    colours = (("sessions_app", "#e8f0fe"), ("runs_app", "#fef3e8"), ("config", "#eeeeee"))
    for app, colour in colours:
        members = [n for n in nodes if n == app or n.startswith(app + ".")]
        lines.append(
            f'  subgraph "cluster_{app}" {{ label="{app}"; style=filled; color="{colour}";'
        )
        lines += [f'    "{n}" [style=filled, fillcolor=white];' for n in members]
        lines.append("  }")
    for (a, b), n in sorted(counted.items()):
        lines.append(f'  "{a}" -> "{b}" [penwidth={min(3.0, 0.6 + n / 8):.1f}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png", help="write a PNG there (graphviz's dot)")
    parser.add_argument("--level", choices=("apps", "modules"), default="apps")
    args = parser.parse_args()
    text = dot(args.level)
    if args.png:
        subprocess.run(
            ["dot", "-Tpng", "-Gdpi=110", "-o", args.png], input=text.encode(), check=True
        )
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
