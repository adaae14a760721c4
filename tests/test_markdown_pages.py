"""The Markdown pages come from templates: no Python module but the one Markdown table writer
(``reporting.render.markdown``) builds a table row out of ``"| ... |"`` strings, and every Markdown template renders
its tables through that writer."""

import ast

from helpers.paths import ROOT

SRC = ROOT / "src" / "ctxbench"
WRITER = ("reporting/render.py", "markdown")


def _table_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String pieces (plain or of an f-string) that open or rule a Markdown table row."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.lstrip()
            if text.startswith("| ") or text.startswith("|---") or text.endswith(" |"):
                found.append((node.lineno, node.value))
    return found


def _writer_lines() -> range:
    tree = ast.parse((SRC / WRITER[0]).read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == WRITER[1])
    return range(fn.lineno, fn.end_lineno + 1)


def test_no_markdown_table_is_built_in_python():
    writer = _writer_lines()
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, text in _table_strings(ast.parse(path.read_text(encoding="utf-8"))):
            if not (rel == WRITER[0] and line in writer):
                offenders.append(f"{rel}:{line}: {text!r}")
    assert offenders == []


def test_the_check_finds_a_table_row():
    code = 'x = "| a | b |"\ny = f"| {a} | b"\nz = "|---|"\nw = "a | b"'
    assert {line for line, _ in _table_strings(ast.parse(code))} == {1, 2, 3}


def test_the_markdown_templates_render_tables_through_the_writer():
    from ctxbench.reporting.render import render_page
    from ctxbench.reporting.results_table import Cell, text_table

    pages = sorted(p.name for p in (SRC / "resources" / "templates").glob("*.md.j2"))
    assert {"table1.md.j2", "pairs.md.j2", "variants.md.j2", "families.md.j2", "families_pairs.md.j2",
            "summary.md.j2", "retrieval.md.j2"} <= set(pages)
    t = text_table(("Model", "x"), [["bm25", Cell("0.5 <b>", strong=True)]], title="T")
    md = render_page("retrieval.md.j2", title="R & D", tables=[t], notes=[], evidence=None)
    # Markdown is not HTML-escaped; the table is the writer's; no blank-line runs; one final newline
    assert md == "# R & D\n\n## T\n\n| Model | x |\n|---|---|\n| bm25 | **0.5 <b>** |\n"
