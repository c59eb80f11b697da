"""The package diagram of docs/architecture.md, drawn from the code's imports.

    .venv/bin/python -m scripts.architecture          # rewrite the diagram in the doc
    .venv/bin/python -m scripts.architecture --check  # exit 1 when the doc is not current

An arrow ``a --> b`` means some module of package ``a`` imports some module of ``b`` (every
import statement, function-level ones too, as grimp reads them), labelled with how many
module pairs do. ``LAYERS`` is the direction the packages may import in, top to bottom;
tests/test_structure.py enforces it and tests/test_architecture_doc.py that the doc's
diagram is the code's.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- diagram: made by scripts/architecture.py from the code; do not edit -->"
END = "<!-- end of diagram -->"

# Top to bottom: a package imports only packages of lower layers (never one of its own layer,
# never one above). Siblings in one layer know nothing of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("config",),
    ("runs_app",),
    ("sessions_app",),
    ("quotas_app", "api"),
    ("realtime", "workspace"),
    ("core",),
)
PACKAGES = tuple(p for layer in LAYERS for p in layer)


def edges() -> Counter[tuple[str, str]]:
    graph = grimp.build_graph(*PACKAGES)
    counted: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        here = module.split(".")[0]
        for imported in graph.find_modules_directly_imported_by(module):
            there = imported.split(".")[0]
            if there != here and there in PACKAGES:
                counted[(here, there)] += 1
    return counted


def diagram() -> str:
    lines = [BEGIN, "", "```mermaid", "flowchart TD"]
    for layer in LAYERS:
        for package in layer:
            lines.append(f"    {package}[{package}]")
    for (a, b), n in sorted(edges().items()):
        lines.append(f"    {a} -->|{n}| {b}")
    lines += ["```", "", END]
    return "\n".join(lines)


def current(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + diagram() + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the doc is not current")
    args = parser.parse_args(argv)
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC}: the diagram's markers are missing", file=sys.stderr)
        return 1
    fresh = current(text)
    if args.check:
        if fresh != text:
            print(f"{DOC} is not current: run python -m scripts.architecture", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
