"""The renderers of a ``results_table.Table``, one per format (Markdown, CSV, HTML), and the Jinja2 environment of the
generated pages.

The pages are rendered from the template files in ``ctxbench/resources/templates``; Python hands them data (strings,
figures and ``Table``s), never markup. HTML pages (``*.html.j2``) are autoescaped: every string from the data is
escaped where it is written, control characters shown as U+FFFD. Markdown pages (``*.md.j2``: table1.md, pairs.md,
summary.md, ...) are written as is, each ``Table`` through the ``md`` filter (``markdown``, the one Markdown table
writer).
"""

from __future__ import annotations

import csv
import io
import re
from functools import lru_cache
from typing import Any

import jinja2

from ctxbench.reporting.results_table import Table

TEMPLATES = "resources/templates"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _finalize(value: Any) -> Any:
    """Every ``{{ }}`` output: control characters (invalid in HTML) shown as U+FFFD before escaping."""
    if isinstance(value, str) and not hasattr(value, "__html__"):  # markup (a macro's, tojson's) is already safe
        return _CONTROL.sub("\ufffd", value)
    return value


@lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    """The templates of ``ctxbench/resources/templates``, autoescaped; ``tojson`` keeps the keys' order and writes
    no spaces (the data block of a page)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("ctxbench", TEMPLATES), autoescape=_escaped,
                             undefined=jinja2.StrictUndefined, finalize=_finalize, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=False)
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "separators": (",", ":")}
    env.filters["md"] = lambda table: "\n".join(markdown(table))
    return env


def _escaped(name: str | None) -> bool:
    """Autoescape every template but the Markdown ones (Markdown has no escaping; its tables are ``markdown``'s)."""
    return not (name or "").endswith(".md.j2")


def render_page(template: str, **context: Any) -> str:
    """A page from ``template`` (a file of ``ctxbench/resources/templates``); a Markdown page ends with one newline
    and has no run of blank lines (the templates' conditional sections leave none)."""
    text = environment().get_template(template).render(**context)
    if not template.endswith(".md.j2"):
        return text
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def markdown(table: Table) -> list[str]:
    """The table's lines in Markdown (a cell in bold: ``**text detail** note``)."""
    def cell(c) -> str:
        body = " ".join(p for p in (c.text, c.detail) if p)
        return " ".join(p for p in (f"**{body}**" if c.strong else body, c.note) if p)

    return (["| " + " | ".join(table.columns) + " |", "|---" * len(table.columns) + "|"]
            + ["| " + " | ".join(cell(c) for c in row.cells) + " |" for row in table.rows])


def csv_text(table: Table) -> str:
    """The table in CSV: the column names, then each row's cells as text (``Cell.plain``)."""
    out = io.StringIO()
    csv.writer(out).writerows(table.grid())
    return out.getvalue()


def html(table: Table) -> str:
    """The table in HTML (the ``table`` macro of ``macros.html.j2``, which the pages call too)."""
    return str(environment().get_template("macros.html.j2").module.table(table))
