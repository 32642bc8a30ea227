"""The package's layers, lowest first; a module imports only from its own layer or one below it, and no
modules import each other in a circle. Imports inside functions count as much as those at the top: kgen
defers many on purpose (torch, Ray and rich wait until a command needs them; the sandboxed harness must
not pull in the trusted side), and a deferred import is still a dependency.

    core       kgen, kgen.core: errors, the records that cross stages, where files are, pyast, fmt
    problems   kgen.problems: problem files and their sizes, the roofline
    harness    kgen.harness: the untrusted side, in the candidate's sandboxed process
    judge      kgen.judge: the trusted side of an evaluation (verdict, timing, audits, sandbox, profiles, baselines)
    store      kgen.store: the results DB, its migrations, and what is read from it (history, ledger, leaderboard)
    proposers  kgen.proposers: the proposers and their prompts
    search     kgen.search: the round loop, Ray workers and cluster, progress, collections
    outputs    kgen.outputs: export, report, bench
    cli        kgen.cli, kgen.__main__

So the harness imports nothing of the judge, the store, the search or the CLI; the judge nothing of the
store (the DB) or above; the store nothing of the proposers, the search, the outputs or the CLI. The harness
is held to more: of kgen it imports only itself and kgen.core, and of other packages only torch, triton and
the standard library (it runs beside the candidate). Other packages belong to the layers that need them:
SQLAlchemy and Alembic from the store up, openai and Jinja2 from the proposers up, Ray from the search up,
matplotlib from the outputs up, typer only in the CLI.
"""

import ast
import sys
from pathlib import Path

from conftest import REPO

LAYERS = ("core", "problems", "harness", "judge", "store", "proposers", "search", "outputs", "cli")
HARNESS_MAY_IMPORT = {"torch", "triton"}  # besides the standard library and kgen.core
LOWEST_LAYER_OF = {"sqlalchemy": "store", "alembic": "store", "openai": "proposers", "jinja2": "proposers",
                   "ray": "search", "matplotlib": "outputs", "typer": "cli"}


def module_files(root: Path = REPO) -> dict[str, Path]:
    """Every module of the kgen package by its dotted name (a package by its __init__.py)."""
    out = {}
    for path in sorted((root / "kgen").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(modules: dict[str, Path]) -> dict[str, set[tuple[str, int]]]:
    """What each module imports, anywhere in it (top level, functions, classes, try and if blocks), as
    (name, line): a kgen module by its dotted name (`from kgen.x import y` is kgen.x.y when that is a
    module, else kgen.x), any other package by its top-level name."""
    found: dict[str, set[tuple[str, int]]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: set[tuple[str, int]] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {(alias.name, node.lineno) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    names.add((full if full in modules else base, node.lineno))
        found[module] = set()
        for name, line in names:
            if name == "kgen" or name.startswith("kgen."):
                while name not in modules:  # `import kgen.x.y` of something that is not a module: its module
                    name = name.rpartition(".")[0]
                if name != module:
                    found[module].add((name, line))
            else:
                found[module].add((name.split(".")[0], line))
    return found


def layer_of(module: str) -> str | None:
    if module == "kgen":
        return "core"
    if module == "kgen.__main__":
        return "cli"
    sub = module.split(".")[1]
    return sub if sub in LAYERS else None


def kgen_edges(found: dict[str, set[tuple[str, int]]]) -> dict[str, set[str]]:
    return {m: {name for name, _ in names if name == "kgen" or name.startswith("kgen.")} for m, names in found.items()}


def crossings(found: dict[str, set[tuple[str, int]]]) -> list[str]:
    """Every import of a kgen module in a higher layer than the importer's."""
    out = []
    for module, names in sorted(found.items()):
        for name, line in sorted(names):
            if not (name == "kgen" or name.startswith("kgen.")):
                continue
            if LAYERS.index(layer_of(name)) > LAYERS.index(layer_of(module)):
                out.append(f"{module} ({layer_of(module)}) imports {name} ({layer_of(name)}) at line {line}")
    return out


def harness_breaches(found: dict[str, set[tuple[str, int]]]) -> list[str]:
    out = []
    for module, names in sorted(found.items()):
        if layer_of(module) != "harness":
            continue
        for name, line in sorted(names):
            if name == "kgen" or name.startswith("kgen."):
                allowed = layer_of(name) in ("core", "harness") and name != "kgen"
            else:
                allowed = name in HARNESS_MAY_IMPORT or name in sys.stdlib_module_names
            if not allowed:
                out.append(f"{module} imports {name} at line {line}")
    return out


def misplaced_packages(found: dict[str, set[tuple[str, int]]]) -> list[str]:
    out = []
    for module, names in sorted(found.items()):
        for name, line in sorted(names):
            lowest = LOWEST_LAYER_OF.get(name)
            if lowest is not None and LAYERS.index(layer_of(module)) < LAYERS.index(lowest):
                out.append(f"{module} ({layer_of(module)}) imports {name} (from the {lowest} up) at line {line}")
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected group of more than one node (Tarjan's algorithm), as
    one path around it that ends where it starts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_path_around(sorted(g), edges) for g in groups]


def _path_around(group: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first node back to itself, inside the group (breadth first)."""
    start, members = group[0], set(group)
    parent: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges.get(node, set()) & members):
                if nxt == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    return group


def subpackage_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    def sub(module: str) -> str:
        return module if module in ("kgen", "kgen.__main__") else ".".join(module.split(".")[:2])
    out: dict[str, set[str]] = {}
    for module, names in edges.items():
        out.setdefault(sub(module), set()).update(sub(n) for n in names if sub(n) != sub(module))
    return out


MODULES = module_files()
FOUND = imports(MODULES)


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == [], \
        "a module outside the layers: put it in the subpackage of its layer (see this file's docstring)"
    assert len(MODULES) > 60  # the scan found the package


def test_no_module_imports_from_a_layer_above_its_own():
    assert crossings(FOUND) == []


def test_the_harness_imports_only_itself_kgen_core_torch_triton_and_the_standard_library():
    assert harness_breaches(FOUND) == []


def test_other_packages_are_imported_only_from_the_layer_that_needs_them_up():
    assert misplaced_packages(FOUND) == []


def test_no_modules_import_each_other_in_a_circle():
    assert [" -> ".join(c) for c in circles(kgen_edges(FOUND))] == []


def test_no_subpackages_import_each_other_in_a_circle():
    assert [" -> ".join(c) for c in circles(subpackage_edges(kgen_edges(FOUND)))] == []


def test_the_checks_catch_a_crossing_a_breach_of_the_harness_and_a_circle():
    """The checks above, on the real imports with a few bad ones added: each is reported."""
    bad = {m: set(names) for m, names in FOUND.items()}
    bad["kgen.harness.runner"] |= {("kgen.judge.judge", 1), ("rich", 2), ("kgen.problems.problem", 3)}
    bad["kgen.store.leaderboard"].add(("kgen.search.loop", 4))
    bad["kgen.judge.verify"].add(("sqlalchemy", 5))
    bad["kgen.store.db"].add(("kgen.store.queries", 6))  # queries imports db: a circle
    assert crossings(bad) == ["kgen.harness.runner (harness) imports kgen.judge.judge (judge) at line 1",
                              "kgen.store.leaderboard (store) imports kgen.search.loop (search) at line 4"]
    assert harness_breaches(bad) == ["kgen.harness.runner imports kgen.judge.judge at line 1",
                                     "kgen.harness.runner imports kgen.problems.problem at line 3",
                                     "kgen.harness.runner imports rich at line 2"]
    assert misplaced_packages(bad) == ["kgen.judge.verify (judge) imports sqlalchemy (from the store up) at line 5"]
    assert ["kgen.store.db", "kgen.store.queries", "kgen.store.db"] in circles(kgen_edges(bad))
    upward = dict(FOUND, **{"kgen.judge.verify": {("kgen.search.loop", 7)}})  # the search imports the judge
    assert circles(subpackage_edges(kgen_edges(upward))) == [["kgen.judge", "kgen.search", "kgen.judge"]]
