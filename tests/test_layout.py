"""The layout rules of the package, checked on its source: modules and functions short enough to
read in one pass, imports that go one way (no loop, imports inside functions included), and front
ends that reach the search space and code generation only through the layers between."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tunesearch"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 150
FRONT_ENDS = ("tunesearch.tensor", "tunesearch.onnx", "tunesearch.cli")
BELOW_FRONT_ENDS = ("tunesearch.space", "tunesearch.codegen")

# Files rewritten on another branch (the convolution forms move out of the importer into a
# lowering package); they are held to these rules once that work is merged, which empties this.
PENDING: set[str] = set()


def _sources() -> dict[str, Path]:
    """Module name -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


ALL_MODULES = _sources()
# the modules held to the rules: all but the pending ones
MODULES = {module: path for module, path in ALL_MODULES.items()
           if path.relative_to(ROOT).as_posix() not in PENDING}


def _imported(path: Path, module: str) -> set[str]:
    """The modules of the package that `module` imports anywhere in its file (inside functions
    too), but under `if TYPE_CHECKING:`, which never runs."""
    tree = ast.parse(path.read_text())
    unrun = {id(node) for branch in ast.walk(tree)
             if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
             for statement in branch.body for node in ast.walk(statement)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if id(node) in unrun:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # `from package import module` imports that module, else a name of `base`
            names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in ALL_MODULES else base
                      for alias in node.names]
    out = set()
    for name in names:
        while name and name not in ALL_MODULES:
            name = name.rpartition(".")[0]
        if name in MODULES and name != module:
            out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    return {module: _imported(path, module) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return out


def test_no_module_is_too_long():
    long = {str(path.relative_to(ROOT)): n for path in MODULES.values()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_too_long():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, f"modules that import each other, directly or around a loop: {cycles}"


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from tunesearch.tensor import Tensor\n"
                      "def f():\n    from tunesearch import settings\n"
                      "    from .errors import UserError\n")
    assert _imported(module, "tunesearch.probe") == {"tunesearch.settings", "tunesearch.errors"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_front_ends_do_not_reach_the_space_or_code_generation():
    graph = _graph()
    reached = {module: sorted(other for other in imported
                              if other.startswith(BELOW_FRONT_ENDS))
               for module, imported in graph.items() if module.startswith(FRONT_ENDS)}
    reached = {module: others for module, others in reached.items() if others}
    assert not reached, f"front-end modules importing {BELOW_FRONT_ENDS}: {reached}"
