"""The package's import graph: each layer imports only those below it (DESIGN.md section 1,
docs/architecture.md), and no module imports itself back through others.

Read from the source with `ast` (nothing is imported): every `import` and `from ... import`, at
module level or inside a function, except those under `if TYPE_CHECKING:` (annotations only).
`from ptowsp.te import Expr` counts as an import of the module that defines `Expr`, following the
package's re-exports, so a package's `__init__` does not tie all its modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "ptowsp"

# rank of each top-level part: a module imports its own part or a part of lower rank, nothing else
RANKS = {
    "errors": 0, "once": 0, "progress": 0,
    "te": 1, "runtime": 1,  # the runtime sits beside the compiler: errors and once only
    "workloads": 2, "schedules": 3, "lower": 4, "backends": 5, "timing": 5,
    "autoschedule": 6, "frontend": 6,
    "ptowsp": 7,  # the public API (`ptowsp/__init__.py`) re-exports the layers
    "cli": 8, "__main__": 9,  # the command, written against the public API
}
ONLY = {"runtime": {"errors", "once"}}  # a part that may import these and nothing else of the package
ALSO = {"frontend": {"ptowsp"}}  # a part that may also import these: the frontend builds with pw.* (it
# sits beside autoschedule, and `ptowsp/__init__.py` loads it only when `pw.frontend` is first used)


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, str | None]]:
    """(module, imported name or None) of every import in `name`'s source outside TYPE_CHECKING."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, None) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                found.extend((base, a.name) for a in child.names)
            visit(child)

    visit(ast.parse(MODULES[name].read_text()))
    return found


def _graph() -> nx.DiGraph:
    raw = {m: _imports(m) for m in MODULES}
    reexported = {(m, n): base for m in MODULES if MODULES[m].name == "__init__.py" for base, n in raw[m] if n}

    def resolve(base: str, n: str | None) -> str:
        for _ in range(8):  # follow a name through the packages that re-export it
            if n and f"{base}.{n}" in MODULES:
                return f"{base}.{n}"
            if (base, n) not in reexported:
                break
            base = reexported[(base, n)]
        return base

    graph = nx.DiGraph()
    for m, found in raw.items():
        graph.add_node(m)
        for base, n in found:
            target = resolve(base, n) if base.startswith("ptowsp") else None
            if target in MODULES and target != m:
                graph.add_edge(m, target)
    return graph


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else "ptowsp"


def test_no_module_imports_itself_back_through_others():
    cycles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_each_layer_imports_only_the_layers_below_it():
    assert set(map(_part, MODULES)) <= RANKS.keys(), "a new top-level part needs its rank here"
    def allowed(pa: str, pb: str) -> bool:
        if pa == pb:
            return True
        if pa in ONLY:
            return pb in ONLY[pa]
        return RANKS[pb] < RANKS[pa] or pb in ALSO.get(pa, ())

    wrong = [f"{a} -> {b}" for a, b in _graph().edges if not allowed(_part(a), _part(b))]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_checker_sees_imports_inside_functions_and_follows_reexports():
    graph = _graph()
    assert graph.has_edge("ptowsp.runtime.trace", "ptowsp.runtime.gantt")  # Trace.plot loads the chart lazily
    assert graph.has_edge("ptowsp.lower.regions", "ptowsp.te.affine")
    assert graph.has_edge("ptowsp.backends.cpu.compile", "ptowsp.te.tensor")  # `from ptowsp.te import Tensor`
    assert not graph.has_edge("ptowsp.runtime.gantt", "ptowsp.runtime.trace")  # annotations only
