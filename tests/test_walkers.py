"""The expression walkers of te/ and lower/ are the ones docs/architecture.md lists, no more.

A walker here is a function that traverses an expression's operands itself: it reads `.src` and
calls itself (directly, as `self.` it, or through other functions of its module), or keeps a stack
of operands.  Rewrites go through the one engine,
te/rewrite.py (`rewrite` with a rule list, `substitute`, `substitute_vars`), and visits through
`walk` / `postorder`; a new hand walker is a deliberate choice, written down in the page's list.
Read from the source with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("te", "lower")


def _called(fn: ast.FunctionDef) -> set[str]:
    """The names fn calls as plain functions or as methods of `self`, or maps over something.  A
    function handed to another engine as its rule (a caller's hook into te/affine.py) is that
    engine's rule, not a walker of its own."""
    found = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                found.add(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                found.add(f.attr)
            if isinstance(f, ast.Name) and f.id in ("map", "filter") and isinstance(node.args[0], ast.Name):
                found.add(node.args[0].id)  # map(visit, e.src) calls visit
    return found


def _keeps_a_stack(fn: ast.FunctionDef) -> bool:
    """Pushes onto a stack (the caller has checked that it reads operands)."""
    return re.search(r"stack(\.extend|\.append| \+=)", ast.unparse(fn)) is not None


def _recursions(functions: list[ast.FunctionDef]) -> list[list[str]]:
    """The groups of a module's functions that call each other round (one recursion: an evaluator's
    methods are one walker), each sorted; a function that calls itself is a group of one."""
    by_name = {f.name: f for f in functions}
    graph = nx.DiGraph()
    for f in functions:
        graph.add_node(f.name)
        graph.add_edges_from((f.name, g) for g in _called(f) if g in by_name)
    return [sorted(group) for group in nx.strongly_connected_components(graph)
            if len(group) > 1 or graph.has_edge(*[*group] * 2)]


def walkers() -> set[str]:
    """`package/module.py:function` of every walker; a walker of several functions that call each
    other is named by all of them, `module.py:a/b/c`."""
    found = set()
    for package in PACKAGES:
        for path in sorted((ROOT / "ptowsp" / package).glob("*.py")):
            functions = [f for f in ast.walk(ast.parse(path.read_text())) if isinstance(f, ast.FunctionDef)]
            reads = {f.name for f in functions if ".src" in ast.unparse(f)}
            groups = [g for g in _recursions(functions) if reads & set(g)]
            groups += [[f.name] for f in functions if f.name in reads and _keeps_a_stack(f)
                       and not any(f.name in g for g in groups)]
            found |= {f"{package}/{path.name}:{'/'.join(g)}" for g in groups}
    return found


def documented() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Expression walkers", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`((?:te|lower)/\w+\.py:[\w/]+)`", section))


def test_every_expression_walker_is_listed_in_the_architecture_page():
    found, listed = walkers(), documented()
    assert not found - listed, f"walkers docs/architecture.md does not list: {sorted(found - listed)}"
    assert not listed - found, f"docs/architecture.md lists walkers that are gone: {sorted(listed - found)}"


def test_the_walker_finder_sees_recursion_and_stacks():
    source = '''
def depth(e):
    return 1 + max((depth(s) for s in e.src), default=0)

def count(e):
    stack, n = [e], 0
    while stack:
        n += 1
        stack.extend(stack.pop().src)
    return n

def first(e):
    return e.src[0]

def work(e):
    return 1 + sum(parts(s) for s in e.src)

def parts(e):
    return work(e.src[0]) if e.src else 0
'''
    functions = [f for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef)]
    assert sorted(map(sorted, _recursions(functions))) == [["depth"], ["parts", "work"]]
    assert [f.name for f in functions if _keeps_a_stack(f)] == ["count"]
