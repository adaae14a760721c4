"""The library's import graph (every import statement, at module level or inside a function): no module or package
imports itself back through others, and the layers point one way: the stages wire the parts together and nothing
below imports them (their config schemas, ``ctxbench.stages.conf``, included); the package root holds a few modules
and three floors below the parts: ``core`` (the part contract, errors), ``jobs`` (job folders and their files) and
``utils``, which imports nothing else of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from helpers.paths import ROOT

SRC = ROOT / "src"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    files = {_module_name(p): p for p in (SRC / "ctxbench").rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            # the most specific module named (``from pkg import mod`` imports pkg.mod)
            hit = next((t for t in targets if t in files and t != name), None)
            if hit is not None:
                graph.add_edge(name, hit)
    return graph


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_graph_is_read():
    graph = import_graph()
    assert graph.number_of_nodes() > 80 and graph.has_edge("ctxbench.stages.run", "ctxbench.evaluation")


def test_no_module_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def test_no_package_cycle():
    graph = import_graph()
    packages = nx.DiGraph()
    packages.add_edges_from((package_of(a), package_of(b)) for a, b in graph.edges if package_of(a) != package_of(b))
    cycles = [sorted(c) for c in nx.strongly_connected_components(packages) if len(c) > 1]
    assert cycles == []


def test_no_upward_import():
    graph = import_graph()
    upward = [(a, b) for a, b in graph.edges
              if (b.startswith("ctxbench.stages") and not a.startswith("ctxbench.stages"))
              or (a.startswith("ctxbench.utils") and not b.startswith("ctxbench.utils"))
              or (a.startswith("ctxbench.core") and not b.startswith(("ctxbench.core", "ctxbench.utils")))]
    assert upward == []


def test_the_package_root_is_small():
    root = sorted(p.name for p in (SRC / "ctxbench").glob("*.py"))
    assert len(root) <= 5, root
    assert {"core", "jobs", "utils"} <= {p.name for p in (SRC / "ctxbench").iterdir() if (p / "__init__.py").is_file()}
