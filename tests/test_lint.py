"""The lint configuration of pyproject.toml ([tool.ruff]: pyflakes and pycodestyle errors, 120 columns, and in the
library McCabe complexity at most 12) holds for the whole project, and no library function is over 60 lines: the
test suite checks both, so CI does."""

import ast
import subprocess
import sys
import tomllib

from helpers.paths import ROOT

MAX_LINES = 60


def test_ruff_finds_nothing():
    argv = [sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "bench", "scripts", "exp"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_library_is_held_to_complexity_12():
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] == 12
    exempt = [pattern for pattern, rules in lint.get("per-file-ignores", {}).items() if "C901" in rules]
    assert exempt and not any("src" in pattern for pattern in exempt)  # the tests, benches and scripts only


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[int, str, int]]:
    """``(line, name, length)`` of every function (docstring and comments included) over ``limit`` lines."""
    return [(n.lineno, n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def test_no_library_function_is_over_60_lines():
    found = [f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)"
             for p in sorted((ROOT / "src" / "ctxbench").rglob("*.py"))
             for line, name, n in long_functions(p.read_text(encoding="utf-8"))]
    assert found == []


def test_a_long_function_is_found():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(f"def f():\n{body}\n") == [(1, "f", 62)]
    assert long_functions("def g():\n    return 1\n") == []
