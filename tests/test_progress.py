"""Progress of the long steps (ctxbench.utils.progress): log lines when the output is not a terminal, a tqdm bar on one,
nothing when switched off; the batched steps and the encoder count every item."""

from __future__ import annotations

import io
import logging
import re

import pytest

from ctxbench.utils import progress
from ctxbench.utils.batching import run_in_batches

from helpers.paths import CACHE_DIR


@pytest.fixture(autouse=True)
def _enabled():
    progress.set_enabled(True)
    yield
    progress.set_enabled(True)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ctxbench.utils.progress"]


def test_log_lines_count_the_items_and_end_with_the_total(monkeypatch, caplog):
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "0")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    seen = []
    run_in_batches(10, 4, lambda lo, hi: seen.append((lo, hi)), what="deletion passes", unit="seq")
    assert seen == [(0, 4), (4, 8), (8, 10)]
    lines = _lines(caplog)
    counts = [re.search(r"\| (\d+)/10 \[", line).group(1) for line in lines]
    assert counts == ["4", "8", "10"]  # the last line is not repeated when the step closes
    assert all(line.startswith("deletion passes:") and "seq/s" in line for line in lines)


def test_a_closed_step_adds_its_end_once(monkeypatch, caplog):
    """A step whose last interval line is older than its end gets one closing line, and closing again (the stage's
    `with` block after an explicit close, as on a SIGTERM) adds none."""
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "0")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    p = progress.bar(3, "examples")
    p.update(1)
    p.every = 3600.0  # the next updates fall inside the interval: no line of their own
    p.update(2)
    p.close()
    p.close()
    counts = [re.search(r"\| (\d+)/3 \[", line).group(1) for line in _lines(caplog)]
    assert counts == ["1", "3"]


def test_a_step_shorter_than_the_interval_writes_nothing(monkeypatch, caplog):
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "3600")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    run_in_batches(10, 4, lambda lo, hi: None, what="deletion passes")
    assert _lines(caplog) == []


def test_the_description_and_postfix_reach_the_line(monkeypatch, caplog):
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "0")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    with progress.bar(2, "run_exp x", "method") as bar:
        bar.set_description("run_exp x example 1/2 attention: recovery")
        bar.set_postfix_str("3.5 s/example")
        bar.update(1)
    assert re.fullmatch(r"run_exp x example 1/2 attention: recovery:  50%\|#+ *\| 1/2 \[.*, 3\.5 s/example\]",
                        _lines(caplog)[0])


def test_switched_off_writes_nothing(monkeypatch, caplog):
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "0")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    progress.set_enabled(False)
    run_in_batches(10, 4, lambda lo, hi: None, what="deletion passes")
    assert _lines(caplog) == []


def test_a_bad_interval_is_named_and_the_default_used(monkeypatch, caplog):
    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "soon")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    assert progress.log_every_s() == progress.LOG_EVERY_S
    assert "CTXBENCH_PROGRESS_EVERY_S='soon'" in caplog.text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_tqdm_bar(monkeypatch, caplog):
    from tqdm import tqdm

    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(progress, "TERMINAL_DELAY_S", 0.0)
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    made = []
    bar = progress.bar
    monkeypatch.setattr(progress, "bar", lambda *a, **k: made.append(bar(*a, **k)) or made[-1])
    run_in_batches(10, 4, lambda lo, hi: None, what="embedder", unit="text")
    assert isinstance(made[0], tqdm) and made[0].n == 10 and made[0].total == 10
    assert "\rembedder:   0%" in term.getvalue()  # drawn, then cleared (a step's bar is not left)
    with bar(3, "run_exp x", "method", leave=True) as stage:
        stage.update(3)
    assert "run_exp x: 100%" in term.getvalue() and "3/3" in term.getvalue()  # a stage's bar is left
    assert _lines(caplog) == []  # the bar, not log lines


@pytest.mark.slow
def test_the_encoders_progress_reaches_the_document_count(monkeypatch, caplog):
    from ctxbench.models.embedder import Embedder

    monkeypatch.setenv("CTXBENCH_PROGRESS_EVERY_S", "0")
    caplog.set_level(logging.INFO, logger="ctxbench.utils.progress")
    texts = [f"Document {i} is about the number {i * 7}." for i in range(50)]
    vecs = Embedder(batch_size=8, cache_dir=str(CACHE_DIR)).encode(texts, 64)
    assert vecs.shape[0] == 50
    lines = [line for line in _lines(caplog) if line.startswith("embedder:")]
    assert len(lines) >= 7 and re.search(r"\| 50/50 \[", lines[-1]) and "text/s" in lines[-1]
