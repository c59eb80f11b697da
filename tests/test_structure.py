"""The structure the design asks for (docs/architecture.md "The packages and their imports",
docs/style.md "One owner per concern"), checked on the code itself so that a change that
breaks it fails here:

* imports go one way, ``runs_app`` → ``sessions_app`` → ``quotas_app`` (which uses only
  ``core.errors``), and no module imports itself back
  through others (no cycle, function-level imports counted);
* no function-level import hides a cycle;
* the session row is locked in one module (``sessions_app/services/lock.py``), and the
  run's transitions (claim, hand-over) happen in one (``runs_app/lifecycle.py``);
* the mode (embedded or services) is decided in one module (``core/mode.py``);
* runs execute in one home, ``runs_app/execution/``: the rest of the project imports only its
  entry points, the runtime never reaches the host, and the agent loop is phase modules over
  one context whose imports go down floors;
* the session's busy lock (holder and lease) is written in ``lock.py`` only, and a session's
  repository lives in one home (``sessions_app/repositories/``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

from scripts import architecture

ROOT = Path(__file__).resolve().parents[1]
APPS = architecture.PACKAGES  # the project's packages, one list


def sources(*packages: str) -> list[Path]:
    return [
        p
        for package in packages
        for p in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in p.parts
    ]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*APPS)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: the groups of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_sessions_app_never_imports_runs_app(graph):
    arrows = sorted(
        (module, imported)
        for module in graph.modules
        if module.startswith("sessions_app")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("runs_app")
    )
    assert not arrows, f"sessions_app must not import runs_app: {arrows}"


def test_quotas_app_imports_only_the_error_vocabulary(graph):
    """``quotas_app`` sits under both apps (they ask it for limits and record usage through
    it): of the project it may import only ``core.errors``."""
    arrows = sorted(
        (module, imported)
        for module in graph.modules
        if module.startswith("quotas_app")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(("runs_app", "sessions_app", "config")) and imported != "core.errors"
    )
    assert not arrows, f"quotas_app must not import these: {arrows}"


def test_the_api_floor_knows_no_app(graph):
    """``api`` (the base ViewSet, the parser, the guards, the error shape, the serializers'
    blocks) sits under both apps that serve endpoints: it imports neither of them, nor
    ``quotas_app`` or ``config``, so each app builds its API on it and not on the other's."""
    arrows = sorted(
        (module, imported)
        for module in graph.modules
        if module.split(".")[0] == "api"
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] in ("runs_app", "sessions_app", "quotas_app", "config")
    )
    assert not arrows, f"api must not import these: {arrows}"


def test_there_is_no_import_cycle(graph):
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = strongly_connected(edges)
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_cycle_finder_finds_cycles():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_function_level_imports():
    """No import inside a function anywhere in app code, but in an ``AppConfig.ready`` —
    Django's documented place for start-up registration — and there only of the app's own
    modules (a relative import): a function-level import of another package is a hidden
    arrow between the two."""
    found = []
    for path in sources(*APPS):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            ready = path.name == "apps.py" and node.name == "ready"
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Import | ast.ImportFrom):
                    continue
                if ready and isinstance(inner, ast.ImportFrom) and inner.level > 0:
                    continue
                found.append(f"{rel(path)}:{inner.lineno} in {node.name}()")
    assert not found, "import at module level (a local import hides a cycle): " + ", ".join(found)


BUSY_LOCK_FIELDS = {"busy_run_id", "lease_expires_at"}
WRITES = {"update", "create", "update_or_create", "get_or_create", "bulk_create", "bulk_update"}


def busy_lock_writes(path: Path) -> list[tuple[int, str]]:
    """Places in ``path`` that write the session's busy lock (its holder or its lease): a
    ``….update(busy_run_id=…)`` (or ``create``…), an assignment ``x.busy_run_id = …``, a
    ``setattr(x, "lease_expires_at", …)``, or a dict of values with such a key (what an
    ``update(**values)`` writes) — a dict that a function returns is a payload, not a write."""
    tree = ast.parse(path.read_text())
    payloads = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            written = {k.arg for k in node.keywords} & BUSY_LOCK_FIELDS
            if node.func.attr in WRITES and written:
                found.append((node.lineno, ast.unparse(node)[:80]))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr":
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in BUSY_LOCK_FIELDS:
                found.append((node.lineno, ast.unparse(node)[:80]))
        if isinstance(node, ast.Dict) and id(node) not in payloads:
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if keys & BUSY_LOCK_FIELDS:
                found.append((node.lineno, ast.unparse(node)[:80]))
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in BUSY_LOCK_FIELDS:
                found.append((target.lineno, ast.unparse(node)[:80]))
    return found


def test_the_busy_lock_is_written_in_one_module():
    """The session's holder and lease (``busy_run_id``, ``lease_expires_at``) are written by
    ``sessions_app/services/lock.py`` only: a run's claim, renewal, park and hand-over, and
    a clone's prepare job (``hold_for_job``, ``release_job``)."""
    owner = "sessions_app/services/lock.py"
    elsewhere = {
        rel(p): lines for p in sources(*APPS) if rel(p) != owner and (lines := busy_lock_writes(p))
    }
    assert not elsewhere, f"take and release the busy lock through lock.py: {elsewhere}"
    assert busy_lock_writes(ROOT / owner)


def test_the_finder_of_busy_lock_writes_finds_them(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "def f(s, q):\n"
        "    q.update(busy_run_id=None)\n"
        "    s.lease_expires_at = None\n"
        "    values = {'busy_run_id': None}\n"
        "    setattr(s, 'busy_run_id', 1)\n"
        "    q.filter(busy_run_id=1).exists()\n"
        "    return {'busy_run_id': s.busy_run_id}\n"
    )
    assert sorted(line for line, _ in busy_lock_writes(path)) == [2, 3, 4, 5]


def test_repositories_have_one_home():
    """A session's repository (clone, upload, push, checks, credentials, the prepare job and
    its task) lives in ``sessions_app/repositories/``; runs_app neither starts nor registers
    its job (the job picks its own thread or task by ``core.mode``)."""
    home = ROOT / "sessions_app" / "repositories"
    assert {p.stem for p in home.glob("*.py")} >= {
        "fill", "push", "checks", "credentials", "jobs", "tasks"
    }  # fmt: skip
    strays = [
        rel(p)
        for p in sources(*APPS)
        if home not in p.parents and p.stem.startswith(("repo_import", "repo_push", "repo_check"))
    ]
    assert not strays, strays
    graph = grimp.build_graph(*APPS)
    arrows = sorted(
        (module, imported)
        for module in graph.modules
        if module.startswith("runs_app")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("sessions_app.repositories")
    )
    assert not arrows, f"runs_app reaches into the repositories' home: {arrows}"


def calls(path: Path, attribute: str) -> list[int]:
    """Lines of ``path`` that call ``<something>.<attribute>(…)``."""
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attribute
    ]


def session_row_locks(path: Path) -> list[int]:
    """Lines that lock a Session row: ``Session.objects.select_for_update()…``."""
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "select_for_update"
            and "Session.objects" in ast.unparse(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_the_session_row_is_locked_in_one_module():
    owner = "sessions_app/services/lock.py"
    elsewhere = {
        rel(p): lines for p in sources(*APPS) if rel(p) != owner and (lines := session_row_locks(p))
    }
    assert not elsewhere, (
        f"lock the session row with lock.lock_session/lock_idle_session: {elsewhere}"
    )
    assert session_row_locks(ROOT / owner)


def test_the_run_transitions_have_one_owner():
    owner = "runs_app/lifecycle.py"
    for name in ("claim", "hand_over"):
        elsewhere = {
            rel(p): lines
            for p in sources(*APPS)
            if rel(p) not in (owner, "sessions_app/services/lock.py") and (lines := calls(p, name))
        }
        assert not elsewhere, f"lock.{name} outside {owner}: {elsewhere}"
    strategies = [
        rel(p) for p in sources(*APPS) if '"enqueue", "interrupt", "rollback"' in p.read_text()
    ]
    assert strategies == [owner], strategies


def test_the_mode_is_decided_in_one_module():
    owner = "core/mode.py"
    words = ("EMBEDDED", "RUN_EXECUTOR", "REDIS_URL")
    elsewhere = {
        rel(p): [w for w in words if f"settings.{w}" in p.read_text()]
        for p in sources(*APPS)
        if rel(p) not in (owner, "config/settings.py")
    }
    elsewhere = {k: v for k, v in elsewhere.items() if v}
    assert not elsewhere, f"ask core.mode instead: {elsewhere}"


def status_writes(path: Path) -> list[tuple[int, str]]:
    """Places in ``path`` that write a run's ``status``: ``….update(status=…)`` on anything but
    the Session model (the busy lock's own field, written in lock.py), ``….bulk_update(…,
    ["status"])``, a ``CompiledUpdate`` of runs, or ``<run>.status = …`` (a run object's
    field, saved later)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            chain = ast.unparse(node.func.value)
            queryset = "objects" in chain or "filter(" in chain or chain.endswith(("runs", "_set"))
            status = node.func.attr == "update" and any(k.arg == "status" for k in node.keywords)
            # Not a dict's update(), nor lock.py's.
            if status and queryset and "Session" not in chain:
                found.append((node.lineno, ast.unparse(node)[:80]))
            if node.func.attr == "bulk_update" and "'status'" in ast.unparse(node):
                found.append((node.lineno, ast.unparse(node)[:80]))
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("CompiledUpdate")
            and "Run.objects" in ast.unparse(node)
        ):  # a compiled UPDATE of runs (core/compiled.py): only the lifecycle's ``move``
            found.append((node.lineno, ast.unparse(node)[:80]))
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == "status":
                owner = ast.unparse(target.value)
                if "session" not in owner.lower() and "locked" not in owner:
                    found.append((target.lineno, ast.unparse(node)[:80]))
    return found


def test_every_run_status_write_goes_through_the_lifecycle_table():
    """Issue 25: a run's status changes only in ``runs_app/lifecycle.py`` (its ``move`` and
    the table ``MOVES``) — every UPDATE of ``status`` in the code, not a list of names."""
    owner = "runs_app/lifecycle.py"
    elsewhere = {
        rel(p): lines
        for p in sources(*APPS)
        if rel(p) not in (owner, "sessions_app/services/lock.py") and (lines := status_writes(p))
    }
    assert not elsewhere, f"change a run's status with lifecycle.move: {elsewhere}"
    # In the lifecycle itself, the only UPDATE of status is ``move``'s (its values a dict
    # with "status", run by the compiled UPDATE of its shape, ``_move_update``'s).
    tree = ast.parse((ROOT / owner).read_text())
    movers = {
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and any(k.arg == "status" for k in node.keywords)
            and "state" not in ast.unparse(node.func.value)  # a part's state dict
        )
        or (isinstance(node, ast.Dict) and "'status'" in [k and ast.unparse(k) for k in node.keys])
    }
    assert movers == {"move"}, movers
    compiled = {
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "CompiledUpdate"
    }
    assert compiled == {"_move_update"}, compiled


def test_the_lifecycle_table_refuses_a_move_it_does_not_hold():
    from runs_app.lifecycle import MOVES, MoveNotAllowed, move
    from runs_app.models import Run

    statuses = set(Run.Status.values)
    assert "paused" not in statuses, "never set: gone (issue 25)"
    assert {s for pair in MOVES for s in pair} == statuses
    for terminal in Run.TERMINAL:
        assert (terminal, Run.Status.RUNNING) not in MOVES
    with pytest.raises(MoveNotAllowed):
        move("run_x", Run.Status.COMPLETED, Run.Status.RUNNING)


FUNCTION_MAX = 60


def test_no_function_is_longer_than_sixty_lines():
    """A function read in one screen (issue 29); the walk of a run is split by phase."""
    long = set()
    for path in sources(*APPS):
        for node in ast.walk(ast.parse(path.read_text())):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and node.end_lineno - node.lineno + 1 > FUNCTION_MAX:
                long.add(f"{rel(path)}::{node.name}")
    assert long == set(), "split these (no function over 60 lines)"


MODULE_MAX = 500


def test_no_module_is_longer_than_five_hundred_lines():
    """A module a newcomer can read whole: one concern each (issue 29). Migrations aside."""
    long = {
        rel(path): lines
        for path in sources(*APPS)
        if (lines := len(path.read_text().splitlines())) > MODULE_MAX
    }
    assert long == {}, "split these by concern"


# -- the execution home (issue 44) ------------------------------------------------------------
EXECUTION = "runs_app.execution"
# What the rest of the project may import of it: the mode's consequences for runs and the
# enqueue (runtime), the process's host, the fence, what a dead execution left open, the
# drain and the sweep.
EXECUTION_ENTRY_POINTS = {
    f"{EXECUTION}.{name}"
    for name in ("runtime", "host", "fencing", "unfinished", "drain", "sweeper")
}
EXECUTION_MODULES = {
    "runtime", "host", "threads", "keeper", "text_writer", "drain", "sweeper", "fencing",
    "abort_bus", "control", "unfinished",
}  # fmt: skip
# The agent loop's phase modules, by floor (top first): a module imports only modules of the
# floors below its own, so a call between two phases is an import, one way.
LOOP_FLOORS = (
    ("run",),
    ("steps",),
    ("start",),
    ("recovery",),
    ("end", "gate", "model", "tool_calls", "step_end"),
    ("recorder", "usage"),
    ("context",),
    ("errors",),
)


def test_run_execution_lives_in_one_package():
    home = ROOT / "runs_app" / "execution"
    assert {p.stem for p in home.glob("*.py")} >= EXECUTION_MODULES
    assert {p.stem for p in (home / "loop").glob("*.py")} - {"__init__"} == {
        name for floor in LOOP_FLOORS for name in floor
    }
    strays = sorted(
        rel(p)
        for p in (ROOT / "runs_app").rglob("*.py")
        if home not in p.parents and p.stem in EXECUTION_MODULES | {"engine", "loop"}
    )
    assert not strays, f"run execution belongs in runs_app/execution/: {strays}"
    # Importing an entry point imports nothing else of the package (its __init__ is empty).
    init = ast.parse((home / "__init__.py").read_text())
    assert not [n for n in ast.walk(init) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_only_the_entry_points_of_execution_are_imported_from_outside(graph):
    arrows = sorted(
        (module, imported)
        for module in graph.modules
        if not module.startswith(EXECUTION)
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(EXECUTION + ".") and imported not in EXECUTION_ENTRY_POINTS
    )
    assert not arrows, f"import runs_app.execution through its entry points: {arrows}"


def test_no_two_way_pair_inside_execution(graph):
    modules = [m for m in graph.modules if m.startswith(EXECUTION)]
    pairs = sorted(
        (a, b)
        for a in modules
        for b in graph.find_modules_directly_imported_by(a)
        if b.startswith(EXECUTION) and a < b and a in graph.find_modules_directly_imported_by(b)
    )
    assert not pairs, pairs
    # The host hands runs to nothing that calls it back: the runtime (which every run's
    # enqueue goes through) never reaches the host, not even by way of another module.
    assert not graph.chain_exists(f"{EXECUTION}.runtime", f"{EXECUTION}.host")
    assert not graph.chain_exists(f"{EXECUTION}.loop.run", f"{EXECUTION}.host")


def test_the_loop_s_phases_import_down_their_floors(graph):
    floor_of = {name: i for i, floor in enumerate(LOOP_FLOORS) for name in floor}
    loop = f"{EXECUTION}.loop."
    climbs = sorted(
        (module, imported)
        for name, level in floor_of.items()
        for module in [loop + name]
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(loop) and floor_of[imported.removeprefix(loop)] <= level
    )
    assert not climbs, f"a phase imports its own floor or one above: {climbs}"


def test_the_loop_is_functions_over_one_context():
    """No mixins: the loop's only class with state is its context; the others are the
    exceptions that end it."""
    classes = {
        (rel(path), node.name, tuple(ast.unparse(b) for b in node.bases))
        for path in (ROOT / "runs_app" / "execution" / "loop").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    stateful = {name for _, name, bases in classes if not any("Exception" in b for b in bases)}
    assert stateful == {"RunContext"}, classes


def test_the_walk_goes_down_the_floors():
    """docs/architecture.md's walk of a run's id (``scripts/architecture.py`` ``WALK``) is the
    code's: every call an import, no callee reaching its caller back."""
    assert architecture.walk_problems() == []
    assert architecture.WALK[0][0] == "config.urls"
    assert architecture.WALK[-1][0] == "sessions_app.consumers"
