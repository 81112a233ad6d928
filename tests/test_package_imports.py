"""The package's modules import one another one way only.

Dependencies run server -> call -> context: no import circle anywhere in
pygrpc_native, counting every import statement (inside functions and under
``if TYPE_CHECKING:`` too, since a circle hidden there is still a circle in
the design), and a context never imports, even indirectly, the servers that
run it. Read from the installed package's sources with ast, without
importing anything.
"""

import ast
import pathlib
from typing import Dict, List, Optional, Set

import pygrpc_native

PACKAGE = "pygrpc_native"
ROOT = pathlib.Path(pygrpc_native.__file__).parent

# Modules that hold the contexts handlers get, and the call state under them.
CONTEXT_MODULES = ("pygrpc_native._context", "pygrpc_native.aio._context", "pygrpc_native._call_state")
# Modules that run calls: no context module may depend on one.
SERVER_MODULES = (
    "pygrpc_native._server",
    "pygrpc_native.aio._server",
    "pygrpc_native._core",
    "pygrpc_native._calls",
)


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def package_modules() -> Dict[str, pathlib.Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported_modules(name: str, path: pathlib.Path, modules: Set[str]) -> Set[str]:
    """The package's modules that ``name`` imports anywhere in its source.
    A package's own __init__, which Python runs before a submodule, counts
    only where it is imported by name."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                # from . import x: module x if there is one, else a name of
                # the package itself.
                found.add(submodule if submodule in modules else source)
            if node.module:
                found.add(source)
    return {module for module in found if module in modules and module != name}


def compiled_modules() -> Set[str]:
    """The compiled extensions (_native), known by their type stubs: they
    import nothing of the package."""
    return {module_name(path) for path in ROOT.rglob("*.pyi")}


def import_graph() -> Dict[str, Set[str]]:
    modules = package_modules()
    known = set(modules) | compiled_modules()
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import circle of the graph as a path that ends where it starts,
    or None."""
    done: Set[str] = set()
    stack: List[str] = []
    on_stack: Set[str] = set()

    def visit(module: str) -> Optional[List[str]]:
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target in on_stack:
                return stack[stack.index(target) :] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        on_stack.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def reachable(graph: Dict[str, Set[str]], start: str) -> Set[str]:
    seen: Set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "pygrpc_native._core" in graph["pygrpc_native._server"]
    assert "pygrpc_native._native" in graph["pygrpc_native._credentials"]  # from . import _native
    assert "pygrpc_native._context" in graph["pygrpc_native.aio._context"]
    # from . import aio, in health/__init__.py
    assert "pygrpc_native.health.aio" in graph["pygrpc_native.health"]


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_contexts_do_not_know_the_servers():
    graph = import_graph()
    for context in CONTEXT_MODULES:
        servers = sorted(reachable(graph, context).intersection(SERVER_MODULES))
        assert not servers, f"{context} depends on {servers}"
