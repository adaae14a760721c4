"""The results of a run or a report in one long format, and the tables laid out from it.

A ``ResultRow`` is one figure: a task (dataset), a method (with the label of its setting when a report holds it
under two settings), the scorer (mode), the token view and the metric, with its mean, spread, bootstrap interval and
the examples behind it. ``rows_from_summary`` reads them from a job's ``summary.json``, ``rows_from_cells`` from the
Table-1 report's cells (``aggregate.table1``).

The tables a user reads are laid out from these rows here, once: a ``Table`` of ``Cell``s (the text of a figure, its
interval, whether it is bold), which ``ctxbench.reporting.render`` writes as Markdown, CSV or HTML, one renderer per
format. A table written in several formats has the same columns and the same cells in each: the per-job tables
(``summary.md`` and the job's ``report.html``), the Table-1 layout (``table1.md`` and the report's ``report.html``), the
paired comparisons; ``table1.csv`` is the means table (``table1_means``), rendered by the same CSV renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ctxbench.metrics.scorer import VIEW_LABELS
from ctxbench.metrics.stats import StatsSettings


# --- the long format -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResultRow:
    """One figure of a method on a task: ``metric`` (its label, as tables head it; ``key``: the scorer's field) in
    ``view``, scored by ``mode``. ``n`` is the number of examples behind the figure, None when the method's run did not
    score this metric at all (a table shows "–" then); ``examples`` the examples each run of the method scored (more
    than one count when a Table-1 row joins runs); the seconds per example are the method's, repeated on each of its
    figures. ``setting`` names what differs from the first run of the method (``aggregate.label_variants``)."""

    dataset: str
    method: str
    mode: str
    view: str
    metric: str
    higher_is_better: bool
    mean: Optional[float] = None
    std: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    n: Optional[int] = None
    examples: tuple[int, ...] = ()
    attribution_s: Optional[float] = None
    total_s: Optional[float] = None
    setting: str = ""
    key: str = ""

    @property
    def name(self) -> str:
        """The method as a report names it: with its setting label when it has one, ``ifr_multi_hop_both (hops=3)``."""
        return f"{self.method} ({self.setting})" if self.setting else self.method

    @property
    def scored(self) -> bool:
        return self.n is not None


def _figures(method_row: dict, fig: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    if fig is None:
        return method_row
    return {**method_row, "mean": fig.get("mean"), "std": fig.get("std"), "ci_low": fig.get("ci_low"),
            "ci_high": fig.get("ci_high"), "n": fig.get("n", 0)}


def rows_from_summary(summary: Mapping[str, Any], dataset: str = "") -> list[ResultRow]:
    """The figures of a job's ``summary.json`` (``metrics.summary.run_summary``): per scorer, method, view and
    metric."""
    views, methods = summary.get("views") or [], summary.get("methods") or {}
    rows = []
    for name, desc in (summary.get("scorers") or {}).items():
        for method, s in methods.items():
            if name not in s:
                continue
            common = {"dataset": dataset, "method": method, "mode": name, "examples": (s["examples"],),
                      "attribution_s": s.get("avg_attribution_s"),
                      "total_s": s.get("avg_total_s", s.get("avg_attribution_s"))}
            for v in views:
                for m in desc["metrics"]:
                    fig = (s[name].get(v) or {}).get(m["key"])
                    rows.append(ResultRow(**_figures(dict(common, view=v, metric=m["label"], key=m["key"],
                                                          higher_is_better=m["higher_is_better"]), fig)))
    return rows


def rows_from_cells(datasets: Sequence[str], methods: Sequence[str], metrics: Sequence[Mapping[str, Any]],
                    cells: Mapping[tuple[str, str], dict], view: str = "") -> list[ResultRow]:
    """The figures of the Table-1 report (``aggregate.table1``'s cells): per task, method (in the table's order) and
    metric; a cell's ``stats`` give the figures, its ``runs_n`` the examples of each joined run."""
    rows = []
    for d in datasets:
        for me in methods:
            c = cells.get((d, me))
            if c is None:
                continue
            common = {"dataset": d, "method": c.get("method", me), "setting": c.get("setting", ""), "mode": "",
                      "view": view, "examples": tuple(sorted(c.get("runs_n") or ()))}
            for m in metrics:
                fig = c.get("stats", {}).get(m["label"])
                row = dict(common, metric=m["label"], key=m.get("key", ""), higher_is_better=m["higher_is_better"])
                rows.append(ResultRow(**_figures(row, fig)))
    return rows


# --- the cells' text -------------------------------------------------------------------------------------------------

def stat_parts(figures: Mapping[str, Any]) -> tuple[str, str]:
    """``(mean, "[low, high]")`` when the figures carry a bootstrap interval, else ``(mean, "± std")`` (or no second
    part); ``("–", "")`` without a mean."""
    mean = figures.get("mean")
    if mean is None:
        return "–", ""
    if figures.get("ci_low") is not None and figures.get("ci_high") is not None:
        return f"{mean:.3f}", f"[{figures['ci_low']:.3f}, {figures['ci_high']:.3f}]"
    return f"{mean:.3f}", ("" if figures.get("std") is None else f"± {figures['std']:.3f}")


def direction(metrics: list[dict[str, Any]]) -> str:
    """"lower is better", "higher is better", or per column arrows when the metrics disagree."""
    ups = {m["higher_is_better"] for m in metrics}
    if len(ups) == 1:
        return "higher is better" if ups.pop() else "lower is better"
    return "↑ higher, ↓ lower is better"


def metric_header(metric: Mapping[str, Any], mixed: bool) -> str:
    return metric["label"] + ((" ↑" if metric["higher_is_better"] else " ↓") if mixed else "")


def _mixed(metrics: Sequence[Mapping[str, Any]]) -> bool:
    return len({m["higher_is_better"] for m in metrics}) > 1


def view_label(view: str) -> str:
    return VIEW_LABELS.get(view, view)


# --- tables ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """A table cell: ``text`` (a figure's mean, or a name), then ``detail`` (its interval or spread, smaller on the
    page) and ``note`` (never bold: which method is better). ``strong``: in bold; ``best``: the best mean of its
    task, bold on a shaded cell."""

    text: str = ""
    detail: str = ""
    note: str = ""
    strong: bool = False
    best: bool = False

    @property
    def plain(self) -> str:
        """The cell without emphasis, as CSV writes it."""
        return " ".join(p for p in (self.text, self.detail, self.note) if p)


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    starts_group: bool = False  # the first row of a task (a rule above it on the page)


@dataclass(frozen=True)
class Table:
    """Columns and rows of cells, whatever the format; the first ``headers`` cells of a row name it."""

    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    headers: int = 1
    title: str = ""

    def grid(self) -> list[list[str]]:
        """The header and every row, each cell's ``plain`` text."""
        return [list(self.columns)] + [[c.plain for c in r.cells] for r in self.rows]


def _row(*cells: Cell | str, starts_group: bool = False) -> Row:
    return Row(tuple(c if isinstance(c, Cell) else Cell(c) for c in cells), starts_group)


def text_table(columns: Sequence[str], rows: Iterable[Sequence[Cell | str]], headers: int = 1,
               title: str = "") -> Table:
    """A table of names and texts (a report section: the sources, the recall budget, the controls check, ...): each
    row's cells as given, a string as a plain cell."""
    return Table(tuple(columns), tuple(_row(*r) for r in rows), headers=headers, title=title)


@dataclass(frozen=True)
class MinExamples:
    """The fewest examples a figure of a report may rest on: ``default`` for every method, ``of`` per method in its
    place (the FlashTrace paper's protocol lets integrated gradients run on fewer examples than the other methods,
    its N shown). A figure between its method's own minimum and ``default`` is shown with its n, never in bold."""

    default: int = 0
    of: Mapping[str, int] = field(default_factory=dict)

    def __call__(self, method: str) -> int:
        return int(self.of.get(method, self.default))

    def too_few(self, method: str, n: int) -> bool:
        """Whether a figure of ``method`` on ``n`` examples is left unfilled ("too few (n)") and unranked."""
        return n < self(method)

    def ranked(self, cell: Optional[Mapping[str, Any]], label: str) -> Optional[Mapping[str, Any]]:
        """A report cell's figures of ``label`` (mean, interval, n) when the report ranks them: a mean on at least its
        method's minimum of examples; else None."""
        st = (cell or {}).get("stats", {}).get(label) or {}
        if cell is None or st.get("mean") is None or self.too_few(cell["method"], st.get("n") or 0):
            return None
        return st

    @staticmethod
    def of_value(value: Union[int, "MinExamples"]) -> "MinExamples":
        return value if isinstance(value, MinExamples) else MinExamples(int(value))


def figure_cell(row: Optional[ResultRow], min_examples: Union[int, MinExamples] = 0) -> Cell:
    """A figure: ``mean [low, high]`` (or ``mean ± std``), "–" when not scored, "too few (n)" when scored on fewer
    examples than its method's minimum (``MinExamples``), "(n=K)" after it when under the report's default."""
    least = MinExamples.of_value(min_examples)
    if row is None or not row.scored:
        return Cell("–")
    if least.too_few(row.method, row.n):
        return Cell(f"too few ({row.n})")
    text, detail = stat_parts({"mean": row.mean, "std": row.std, "ci_low": row.ci_low, "ci_high": row.ci_high})
    return Cell(text, detail, f"(n={row.n})" if row.n < least.default else "")


def _index(rows: Iterable[ResultRow]) -> dict[tuple, ResultRow]:
    return {(r.dataset, r.name, r.mode, r.view, r.metric): r for r in rows}


def summary_tables(rows: Sequence[ResultRow], descriptions: Mapping[str, Mapping[str, Any]],
                   views: Sequence[str]) -> list[Table]:
    """A job's tables, one per scorer (``descriptions``: ``Scorer.describe()`` by name): rows = methods, columns =
    view x metric (``figure_cell``), then ``scored`` (examples with a figure of the first view and metric, of the
    examples the method ran on) and the seconds per example (the attribution alone, and with every scoring step)."""
    by_key = _index(rows)
    tables = []
    for name, desc in descriptions.items():
        methods = list(dict.fromkeys(r.name for r in rows if r.mode == name))
        if not methods:
            continue
        metrics = desc["metrics"]
        mixed = _mixed(metrics)
        body = []
        for me in methods:
            first = next(r for r in rows if r.mode == name and r.name == me)
            figs = [by_key.get((first.dataset, me, name, v, m["label"])) for v in views for m in metrics]
            scored = figs[0].n if figs and figs[0] is not None and figs[0].n is not None else 0
            total = first.total_s if first.total_s is not None else first.attribution_s
            body.append(_row(me, *[figure_cell(f) for f in figs],
                             f"{scored}/{'/'.join(map(str, first.examples))}", f"{first.attribution_s:.2f}",
                             f"{total:.2f}"))
        tables.append(Table(("method", *[f"{view_label(v)} {metric_header(m, mixed)}" for v in views for m in metrics],
                             "scored", "attribution s/example", "total s/example"), tuple(body),
                            title=f"{desc['title']} ({direction(metrics)})"))
    return tables


def comparison(c: Mapping[str, Any]) -> Cell:
    """A paired comparison (``stats.paired_comparison``): ``A − B [low, high], p=…``, bold with the better method
    named when the difference is significant."""
    if c["diff"] is None:
        return Cell("–")
    if c.get("too_few"):
        return Cell(f"{c['diff']:+.3f}", note=f"(n={c['n']}: too few to test)")
    text = f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], p={c['p_value']:.2g}"
    if c["significant"]:
        return Cell(text, note=f"({c[c['better']]} better)", strong=True)
    return Cell(text)


def comparison_tables(comparisons: Sequence[Mapping[str, Any]], descriptions: Mapping[str, Mapping[str, Any]],
                      views: Sequence[str]) -> list[Table]:
    """A job's paired comparisons, one table per scorer: rows = method pair x view, columns = metrics."""
    tables = []
    for name, desc in descriptions.items():
        rows = [c for c in comparisons if c["mode"] == name]
        if not rows:
            continue
        metrics = desc["metrics"]
        mixed = _mixed(metrics)
        body = []
        for a, b in dict.fromkeys((c["a"], c["b"]) for c in rows):
            for v in views:
                cells = {c["metric"]: c for c in rows if (c["a"], c["b"], c["view"]) == (a, b, v)}
                if cells:
                    n = max(c["n"] for c in cells.values())
                    body.append(_row(a, b, view_label(v), str(n), *[
                        comparison(cells[m["key"]]) if m["key"] in cells else Cell("–") for m in metrics]))
        tables.append(Table(("A", "B", "view", "n", *[metric_header(m, mixed) for m in metrics]), tuple(body),
                            headers=2, title=f"{desc['title']} ({direction(metrics)})"))
    return tables


def task_comparison_tables(comparisons: Sequence[Mapping[str, Any]], datasets: Sequence[str],
                           metrics: Sequence[Mapping[str, Any]]) -> list[Table]:
    """The Table-1 report's paired comparisons, one table per task: rows = method pairs, columns = metrics."""
    mixed = _mixed(metrics)
    tables = []
    for d in datasets:
        rows = [c for c in comparisons if c["dataset"] == d]
        if not rows:
            continue
        body = []
        for a, b in dict.fromkeys((c["a"], c["b"]) for c in rows):
            by_label = {c["label"]: c for c in rows if (c["a"], c["b"]) == (a, b)}
            n = max(c["n"] for c in by_label.values())
            body.append(_row(a, b, str(n), *[comparison(by_label[m["label"]]) if m["label"] in by_label
                                             else Cell("–") for m in metrics]))
        tables.append(Table(("A", "B", "n", *[metric_header(m, mixed) for m in metrics]), tuple(body), headers=2,
                            title=d))
    return tables


def shown_metrics(rows: Sequence[ResultRow], metrics: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The metrics some figure of the rows has a mean of (a column of "–" alone is left out)."""
    filled = {r.metric for r in rows if r.mean is not None}
    return [m for m in metrics if m["label"] in filled]


def task_examples(rows: Sequence[ResultRow], dataset: str) -> str:
    """The examples behind a task's rows: one count, or each distinct count ("18/20") when methods or joined runs
    scored different numbers."""
    return "/".join(str(n) for n in sorted({n for r in rows if r.dataset == dataset for n in r.examples}))


# no interval, test or mark rests on fewer examples (the report's stats.min_n by default): such rows are listed under
# a table, not in it
MIN_STATS = StatsSettings().min_n


def row_examples(rows: Sequence[ResultRow], dataset: str, method: str, labels: Sequence[str]) -> list[int]:
    """The distinct example counts behind a method's figures of ``labels`` on a task, ascending."""
    return sorted({r.n for r in rows if r.dataset == dataset and r.name == method and r.metric in labels
                   and r.scored and r.mean is not None})


def too_few_rows(rows: Sequence[ResultRow], dataset: str, labels: Sequence[str],
                 min_n: int = MIN_STATS) -> list[tuple[str, int]]:
    """``(method, n)`` of the task's methods whose every figure of ``labels`` rests on fewer than ``min_n`` examples:
    left out of the table (no interval, no test), listed under it."""
    out = []
    for me in dict.fromkeys(r.name for r in rows if r.dataset == dataset):
        ns = row_examples(rows, dataset, me, labels)
        if ns and ns[-1] < min_n:
            out.append((me, ns[-1]))
    return out


def common_examples(rows: Sequence[ResultRow], dataset: str, labels: Sequence[str],
                    min_n: int = MIN_STATS) -> Optional[int]:
    """The example count most of the task's tabled methods rest on (the larger on a tie), None without a figure."""
    few = {me for me, _ in too_few_rows(rows, dataset, labels, min_n)}
    per_method = (row_examples(rows, dataset, me, labels)
                  for me in dict.fromkeys(r.name for r in rows if r.dataset == dataset and r.name not in few))
    return most_common_count(ns[-1] for ns in per_method if ns)


def most_common_count(counts: Iterable[int]) -> Optional[int]:
    """The example count most methods of a task rest on (the larger on a tie), None without any: the n a task's
    heading states."""
    tally = Counter(counts)
    return max(tally, key=lambda n: (tally[n], n)) if tally else None


def table1_table(rows: Sequence[ResultRow], metrics: Sequence[Mapping[str, Any]],
                 min_examples: Union[int, MinExamples] = 0, n_of: Optional[Callable[[str], Any]] = None,
                 marks: Optional[Mapping[tuple[str, str, str], str]] = None,
                 controls: Callable[[str], bool] = lambda method: False, min_n: int = MIN_STATS) -> Table:
    """The Table-1 layout: a row per task and method in run order, the task (N) on its first row, the row's own
    example count (``n``: each distinct count of its figures); a column per metric; each task's best mean of a metric
    in bold (none when every method ties, never a figure over fewer than ``min_examples`` examples, which reads "too
    few (n)"; ``MinExamples``). A method whose every figure rests on fewer than ``min_n`` examples has no row
    (``too_few_rows`` lists it). ``n_of``: the task's N (``task_examples`` by default).
    ``marks[(task, method, metric label)]`` is put after a figure (a control's mark against the best method:
    ``reporting.controls``); a method for which ``controls`` is true is named "(control)"."""
    marks = marks or {}
    least = MinExamples.of_value(min_examples)
    by_key = {(r.dataset, r.name, r.metric): r for r in rows}
    datasets = list(dict.fromkeys(r.dataset for r in rows))
    labels = [m["label"] for m in metrics]
    body = []
    for d in datasets:
        few = {me for me, _ in too_few_rows(rows, d, labels, min_n)}
        methods = [me for me in dict.fromkeys(r.name for r in rows if r.dataset == d) if me not in few]
        best = {}
        for m in metrics:
            figs = [by_key[(d, me, m["label"])] for me in methods if (d, me, m["label"]) in by_key]
            figs = [r for r in figs if r.mean is not None]
            # the best of the figures that rest on the report's minimum (one over fewer examples is shown, not
            # ranked); bold marks a difference, not a tie of every method
            rested = [r.mean for r in figs if r.scored and r.n >= least.default]
            if len({r.mean for r in figs}) > 1 and rested:
                best[m["label"]] = max(rested) if m["higher_is_better"] else min(rested)
        n = n_of(d) if n_of is not None else task_examples(rows, d)
        for i, me in enumerate(methods):
            cells = []
            for m in metrics:
                r = by_key.get((d, me, m["label"]))
                cell = figure_cell(r, least)
                top = (r is not None and r.scored and r.n >= least.default and r.mean is not None
                       and r.mean == best.get(m["label"]))
                note = " ".join(x for x in (cell.note, marks.get((d, me, m["label"]), "")) if x)
                cells.append(Cell(cell.text, cell.detail, note, strong=top, best=top))
            name = Cell(me, note="(control)") if controls(me) else Cell(me)
            own = "/".join(map(str, row_examples(rows, d, me, labels))) or "–"
            body.append(_row(f"{d} ({n})" if i == 0 else "", name, own, *cells, starts_group=i == 0))
    mixed = _mixed(metrics)
    return Table(("task (N)", "method", "n", *[metric_header(m, mixed) for m in metrics]), tuple(body), headers=2)


def table1_means(rows: Sequence[ResultRow], datasets: Sequence[str], methods: Sequence[str],
                 labels: Sequence[str], n_of: Callable[[str], Any]) -> Table:
    """``table1.csv``: a row per task, its N, then every method x metric mean unrounded (empty when not scored)."""
    by_key = {(r.dataset, r.name, r.metric): r for r in rows}
    body = []
    for d in datasets:
        means = [by_key.get((d, me, m)) for me in methods for m in labels]
        body.append(_row(d, str(n_of(d)), *["" if r is None or r.mean is None else str(r.mean) for r in means]))
    return Table(("dataset", "n", *[f"{me}/{m}" for me in methods for m in labels]), tuple(body))


def without_task_column(table: Table) -> Table:
    """A one-task Table-1 layout without its task column (the task is the table's heading)."""
    return Table(table.columns[1:], tuple(Row(r.cells[1:], r.starts_group) for r in table.rows), headers=1,
                 title=table.title)


COMPARISON_FIELDS = ("dataset", "label", "a", "b", "n", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value",
                     "significant", "better")


def comparisons_table(comparisons: Sequence[Mapping[str, Any]]) -> Table:
    """``pairs.csv``: one paired comparison a row (the report's rows of ``stats.paired_comparison``), unrounded;
    ``better`` names the method."""
    body = []
    for c in comparisons:
        values = {**c, "better": c[c["better"]] if c.get("better") in ("a", "b") else ""}
        body.append(_row(*["" if values.get(k) is None else str(values.get(k)) for k in COMPARISON_FIELDS]))
    return Table(COMPARISON_FIELDS, tuple(body))
