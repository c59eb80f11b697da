"""docs/configuration.md lists every environment variable the code reads, with the code's
default (issue 28, item 13). The code is read, not imported: every ``os.environ.get(NAME,
default)``, ``os.getenv`` and ``env_bool(NAME, default)`` of ``config/`` and the apps, and
the default, where it is a constant, must be the one the document's table gives."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    "config",
    "sessions_app",
    "runs_app",
    "quotas_app",
    "api",
    "core",
    "workspace",
    "realtime",
]
DOC = ROOT / "docs" / "configuration.md"
# Set by the code itself for its own child processes or the frameworks, never by an operator.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}
READERS = ("os.environ.get", "os.getenv", "env_bool", "os.environ.setdefault")
OPERATIONS = {ast.Mult: lambda a, b: a * b, ast.Pow: lambda a, b: a**b, ast.Add: lambda a, b: a + b}


def _reads() -> dict[str, list[tuple[str, object]]]:
    """Each variable read → [(where, default)], the default a Python value when it is a
    constant (``str(10 * 1024)`` included), ``...`` when the code computes it."""
    found: dict[str, list[tuple[str, object]]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = ast.unparse(node.func)
                if func not in (
                    "os.environ.get",
                    "os.getenv",
                    "env_bool",
                    "os.environ.setdefault",
                ):
                    continue
                name = node.args[0]
                if not isinstance(name, ast.Constant) or not isinstance(name.value, str):
                    continue
                if len(node.args) > 1:
                    default = _constant(node.args[1])
                else:
                    default = False if func == "env_bool" else None
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.setdefault(name.value, []).append((where, default))
    return found


def _constant(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "str" and len(node.args) == 1:
        value = _arithmetic(node.args[0])
        return str(value) if value is not None else ...
    return ...


def _arithmetic(node: ast.expr) -> int | float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if left is None or right is None:
            return None
        ops = {
            ast.Mult: lambda a, b: a * b,
            ast.Pow: lambda a, b: a**b,
            ast.Add: lambda a, b: a + b,
        }
        op = ops.get(type(node.op))
        return op(left, right) if op else None
    return None


def _documented() -> dict[str, str]:
    """Each variable of the document's tables → its default cell (the prose of "Tests and
    benchmarks" and the "read by" table name variables without a default: '')."""
    names: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2:
            continue
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
            names.setdefault(name, cells[1])
    for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", DOC.read_text()):
        names.setdefault(name, "")
    return names


def _says(cell: str, default: object) -> bool:
    text = cell.replace("`", "").lower()
    if default is None or default == "":
        return bool(re.search(r"unset|empty|none|not set", text))
    if isinstance(default, bool):
        return ("true" if default else "false") in text or (not default and "off" in text)
    value = str(default).lower()
    try:
        number = float(value)
    except ValueError:
        return value in text
    return any(float(n) == number for n in re.findall(r"\d+(?:\.\d+)?", text.replace(",", "")))


def test_every_variable_the_code_reads_is_documented_with_its_default():
    reads = _reads()
    assert len(reads) > 50, "the scan found the settings"
    documented = _documented()
    missing = sorted(f"{n} ({w[0][0]})" for n, w in reads.items() if n not in documented)
    assert not missing, "not in docs/configuration.md: " + ", ".join(missing)
    wrong = []
    for name, where in sorted(reads.items()):
        if name in NOT_SETTINGS:
            continue
        for place, default in where:
            if default is ... or not documented[name]:
                continue  # computed (another setting, the mode) or a prose mention
            if not _says(documented[name], default):
                wrong.append(f"{name}: code {default!r} ({place}), doc {documented[name]!r}")
    assert not wrong, "defaults that differ:\n" + "\n".join(wrong)
