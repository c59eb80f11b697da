"""The chat page names every module of its script's import graph in a ``modulepreload``: the
browser then fetches them all at once with the page, instead of finding the second level
only once the first has been parsed (a round trip more before the first message shows)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "static"
IMPORT = re.compile(r"""^\s*import\b[^;]*?\bfrom\s+["'](\.\.?/[^"']+)["']""", re.M | re.S)
PRELOAD = re.compile(r"""rel="modulepreload" href="\{% static '([^']+)' %\}\"""")


def graph(entry: str) -> set[str]:
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = STATIC / name
        if path.suffix not in (".js", ".mjs") or "vendor/" in name:
            continue
        base = Path(name).parent
        for target in IMPORT.findall(path.read_text()):
            todo.append(posixpath.normpath((base / target).as_posix()))
    return {str(Path(n).as_posix()) for n in seen}


def test_every_module_of_the_chat_is_preloaded() -> None:
    modules = graph("app.js")
    assert {"app.js", "panels.js", "blame.js", "markdown.js"} <= modules  # the walk works
    preloaded = set(PRELOAD.findall((ROOT / "templates/app/chat.html").read_text()))
    assert modules - preloaded == set(), "add a modulepreload for these"
    assert preloaded - modules == set(), "preloaded, but the chat does not import it"
