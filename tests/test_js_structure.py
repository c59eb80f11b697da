"""The front end's structure (issue 44, item 3): the ES modules of ``static/`` import one
way, along the layers that ``static/app.js`` writes down, so no two of them import each
other (directly or around a circle); and the state of the chat lives in one module,
``static/chat/store.js``: no other module keeps a module-level ``let`` (a binding that is
reassigned), so "what does the chat know, and who changes it" is answered by one file.

The modules are read with a small scanner (comments, strings, template literals and regular
expressions told apart from code) rather than a JavaScript parser: the project has no Node
toolchain, and what is checked here (the import statements, the top-level declarations) needs
only that much."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "static"
STORE = "chat/store.js"

# Module-level ``let`` kept outside the store, each with the reason it stays. Empty: every
# such binding was moved into the store; one added here must say why it cannot go there.
LET_ALLOWED: dict[str, str] = {}

# Module-level containers (``const x = new Map()``…) outside the store: caches that only their
# own module reads and writes, which drawing the same state again would fill the same way. (A
# name in capitals is a constant: ``const PATH_EVENTS = new Set([…])`` is never changed.)
CACHES: dict[tuple[str, str], str] = {
    ("chat/render.js", "msgNodes"): "the drawn message nodes; emptied by the store's forget",
    ("chat/parts.js", "partNodes"): "the drawn part nodes; emptied by the store's forget",
    ("chat/moves.js", "actionBars"): "the drawn action bars; emptied by the store's forget",
    ("markdown.js", "highlighted"): "highlighted code by its text, bounded (CACHE_SIZE)",
    ("markdown.js", "streams"): "a streaming element's finished blocks, keyed by the element",
    ("roving.js", "used"): "a toolbar's last used button, keyed by the toolbar element",
}

# After these a ``/`` starts a regular expression, not a division.
REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {""}
REGEX_KEYWORDS = {"return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void"}


def _hide(text: str) -> str:
    return "".join(c if c == "\n" else " " for c in text)


def _string_end(src: str, i: int) -> int:
    """The index after the string literal that opens at ``i``."""
    j = i + 1
    while j < len(src) and src[j] != src[i]:
        j += 2 if src[j] == "\\" else 1
    return j + 1


def _template_end(src: str, i: int) -> int:
    """The index after a template literal's text that starts after ``i`` (a backquote or the
    ``}`` of a ``${…}``): after its closing backquote, or after the next ``${``."""
    j = i + 1
    while j < len(src) and src[j] != "`" and not src.startswith("${", j):
        j += 2 if src[j] == "\\" else 1
    return j + 2 if src.startswith("${", j) else j + 1


def _regex_end(src: str, i: int) -> int:
    """The index after the regular expression literal that opens at ``i`` (flags stay code)."""
    j, in_class = i + 1, False
    while j < len(src) and src[j] != "\n" and (src[j] != "/" or in_class):
        if src[j] == "\\":
            j += 1
        elif src[j] in "[]":
            in_class = src[j] == "["
        j += 1
    return j + 1


def _regex_may_start(blank: list[str]) -> bool:
    tail = "".join(blank[-40:]).rstrip()
    word = re.search(r"[A-Za-z_$][\w$]*$", tail)
    return word.group(0) in REGEX_KEYWORDS if word else tail[-1:] in REGEX_AFTER


def scan(src: str) -> tuple[str, str]:
    """(the code without comments, the same with the insides of strings, template literals
    and regular expressions blanked): the first for import specifiers, the second for
    brackets and declarations. Both keep every newline, so offsets give line numbers."""
    code: list[str] = []
    blank: list[str] = []
    templates: list[int] = []  # the bracket depth at each open ``${`` of a template literal
    i, depth = 0, 0
    while i < len(src):
        c = src[i]
        if src.startswith(("//", "/*"), i):
            end = src.find("\n" if c + src[i + 1] == "//" else "*/", i + 2)
            j = len(src) if end < 0 else end + (0 if src[i + 1] == "/" else 2)
            code.append(_hide(src[i:j]))
            blank.append(code[-1])
        elif c in "\"'`/" or (c == "}" and templates and templates[-1] == depth):
            if c in "\"'":
                j = _string_end(src, i)
            elif c == "/" and not _regex_may_start(blank):
                j = i + 1  # a division
            elif c == "/":
                j = _regex_end(src, i)
            else:  # a template literal's text, from its start or from the end of a ``${…}``
                if c == "}":
                    templates.pop()
                j = _template_end(src, i)
                if src.startswith("${", j - 2):
                    templates.append(depth)
            literal = src[i:j]
            code.append(literal)
            keep = 2 if literal.endswith("${") else 1
            inside = literal[1:-keep] if len(literal) > keep else ""
            blank.append(literal[0] + _hide(inside) + literal[-keep:] if j - i > 1 else literal)
        else:
            depth += (c in "{([") - (c in "})]")
            code.append(c)
            blank.append(c)
            j = i + 1
        i = j
    return "".join(code), "".join(blank)


IMPORT = re.compile(
    r"""(?:^|[;}\n])\s*(?:import\s*(?:[\w$*{}\s,]+?\s*from\s*)?|export\s*(?:\*(?:\s*as\s+[\w$]+)?|\{[^}]*\})\s*from\s*)["']([^"']+)["']"""
)
DYNAMIC_IMPORT = re.compile(r"""\bimport\s*\(\s*["']([^"']+)["']""")


def modules(root: Path = STATIC) -> list[str]:
    """Every module of ``root`` (``vendor/`` aside: third-party code), as paths under it."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.js")
        if "vendor" not in p.relative_to(root).parts
    )


def imports(name: str, root: Path = STATIC) -> set[str]:
    """The modules of ``root`` that ``name`` imports (statically, re-exports and dynamic
    ``import()`` of a literal path included)."""
    code, _ = scan((root / name).read_text())
    out = set()
    for spec in IMPORT.findall(code) + DYNAMIC_IMPORT.findall(code):
        if spec.startswith("/static/"):
            target = spec.removeprefix("/static/")
        elif spec.startswith("."):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), spec))
        else:
            continue  # a bare name: no such module here
        if not target.startswith("vendor/"):
            out.add(target)
    return out


def graph(root: Path = STATIC) -> dict[str, set[str]]:
    return {name: imports(name, root) for name in modules(root)}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports, as the modules around it with the first again at the end
    (``a → b → a``), or None. A depth-first walk: a module met again while it is still on
    the walk's path closes a circle."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := walk(node)):
            return found
    return None


TOP_LET = re.compile(r"\b(let|var)\s+[\w${\[]")


def top_level_lets(src: str) -> list[tuple[int, str]]:
    """(line, text) of each ``let`` or ``var`` declared outside every block, function and
    bracket of the module."""
    _, blank = scan(src)
    found = []
    depth = 0
    for i, c in enumerate(blank):
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif depth == 0 and TOP_LET.match(blank, i) and not re.match(r"[\w$.]", blank[i - 1 : i]):
            line = blank.count("\n", 0, i) + 1
            found.append((line, src.splitlines()[line - 1].strip()))
    return found


LAYERS = re.compile(r"^//\s+(\d+)\s+(.+)$", re.M)


def layers(root: Path = STATIC) -> dict[str, int]:
    """The layers that ``app.js`` writes down (lines ``//   <n>  module module …`` under
    "Layers"): module -> its layer."""
    head = (root / "app.js").read_text().split("Layers", 1)[1].split("\nimport", 1)[0]
    return {name: int(n) for n, names in LAYERS.findall(head) for name in names.split()}


# -- the checks ------------------------------------------------------------------------------------
def test_no_module_imports_around_a_circle() -> None:
    edges = graph()
    assert {"app.js", STORE, "chat/render.js", "alternatives.js"} <= set(edges)  # the walk works
    assert "chat/store.js" in edges["chat/api.js"]
    assert find_cycle(edges) is None, "static/ modules import each other in a circle"


def test_the_cycle_finder_finds_a_planted_circle(tmp_path: Path) -> None:
    (tmp_path / "chat").mkdir()
    (tmp_path / "a.js").write_text('import { b } from "./chat/b.js";\n')
    (tmp_path / "chat/b.js").write_text(
        '// import { a } from "../a.js"; (a comment is not an import)\n'
        'import {\n  c,\n} from "./c.js";\nexport const b = `import "../a.js"`;\n'
    )
    (tmp_path / "chat/c.js").write_text('export { a as c } from "../a.js";\n')
    (tmp_path / "d.js").write_text('import "./a.js";\n')
    edges = graph(tmp_path)
    assert edges["chat/b.js"] == {"chat/c.js"}
    assert find_cycle(edges) == ["a.js", "chat/b.js", "chat/c.js", "a.js"]
    (tmp_path / "chat/c.js").write_text('const a = await import("/static/a.js");\n')
    assert find_cycle(graph(tmp_path)) == ["a.js", "chat/b.js", "chat/c.js", "a.js"]
    (tmp_path / "chat/c.js").write_text("export const c = 1;\n")
    assert find_cycle(graph(tmp_path)) is None


def test_the_chat_modules_import_only_from_layers_below_their_own() -> None:
    layer = layers()
    assert layer["app.js"] > layer[STORE]  # the list was read
    reachable, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(imports(name))
    assert reachable - set(layer) == set(), "give these modules a layer in static/app.js"
    climbs = [
        f"{name} (layer {layer[name]}) imports {target} (layer {layer[target]})"
        for name in sorted(reachable)
        for target in sorted(imports(name))
        if layer[target] >= layer[name]
    ]
    assert climbs == []


def test_only_the_store_keeps_module_level_let() -> None:
    checked = [name for name in modules() if name != STORE and name not in LET_ALLOWED]
    found = {n: lets for n in checked if (lets := top_level_lets((STATIC / n).read_text()))}
    assert found == {}, "keep such state in static/chat/store.js (or allow it here, with why)"


TOP_CONTAINER = re.compile(
    r"^(?:export\s+)?const\s+([\w$]+)\s*=\s*(?:new\s+(?:Map|Set|WeakMap|WeakSet)\b|\[\s*\])", re.M
)


def test_only_the_store_keeps_module_level_containers_but_local_caches() -> None:
    found = {
        (name, binding)
        for name in modules()
        if name != STORE
        for binding in TOP_CONTAINER.findall(scan((STATIC / name).read_text())[1])
        if not binding.isupper()
    }
    assert found - set(CACHES) == set(), "keep it in static/chat/store.js (or list the cache here)"
    assert set(CACHES) - found == set(), "no longer there: take it off CACHES"


def test_the_let_finder_tells_top_level_from_nested() -> None:
    src = (
        "// let commented = 1;\n"
        'const s = "let quoted = 1";\n'
        "let top = 1;\n"
        "function f() { let inner = 2; }\n"
        "const re = /let [{]/;\n"
        "const t = `${s} let x`;\n"
        "export let exported = 3;\n"
        "for (let i = 0; i < 1; i++) {}\n"
    )
    assert [line for line, _ in top_level_lets(src)] == [3, 7]
