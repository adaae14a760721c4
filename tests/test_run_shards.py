"""Sharded run_exp and its merge: shard + merge = the unsharded run (results equal except timings), the refusals of
the merge, the report reading a sharded sweep, and the order of rows across shards."""

import json
import shutil

import pytest

from ctxbench.core.errors import ConfigError, DataError
from ctxbench.core.shards import Shard, interleave
from ctxbench.stages.run import RESULTS, run_stage
from ctxbench.stages.run_shards import merge_run

from helpers.configs import run_cfg
from helpers.records import without_time_section, without_timings


def test_interleave_restores_dataset_order():
    rows = [f"r{i}" for i in range(7)]
    slices = {i: Shard(i, 3).select(rows) for i in range(3)}
    assert slices == {0: ["r0", "r3", "r6"], 1: ["r1", "r4"], 2: ["r2", "r5"]}
    assert interleave(slices, 3, 7, "x") == rows


@pytest.mark.parametrize("slices, message", [
    ({0: ["a", "c"]}, "shard 1 of 2 is missing"),
    ({0: ["a", "c"], 1: ["b", "a"]}, "row 'a' is in shards 0 and 1"),
    ({0: ["a"], 1: ["b", "d"]}, "shard 0 of 2 holds 1 rows; 2 expected of 4"),
])
def test_interleave_refusals(slices, message):
    with pytest.raises(DataError, match=message):
        interleave(slices, 2, 4, "runs/")


def _fake_shard(root, index, count, ids, *, config=None, finished=True, records=None):
    """A shard job dir as run_exp writes it (no model needed: the merge refuses before it scores anything)."""
    d = root / f"{index}_shard.index={index}"
    d.mkdir(parents=True)
    cfg = {"attribution": {"random": {}}, "mode": {}, "views": ["seq"], "shard": {"index": index, "count": count},
           **(config or {})}
    (d / "manifest.json").write_text(json.dumps({"stage": "run_exp", "config": cfg, "dataset": {"name": "t"}}))
    if finished:
        (d / "shard.json").write_text(json.dumps({"index": index, "count": count, "n_examples": 4,
                                                  "example_ids": ids, "refused_ids": [], "refused": []}))
    recs = records if records is not None else [{"example_id": e, "method": "random"} for e in ids]
    (d / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


@pytest.mark.parametrize("case, message", [
    ("missing", "shard 1 of 2 is missing"),
    ("unfinished", "shard 1 of 2 is unfinished"),
    ("twice", "shard 0 of 2 twice"),
    ("overlap", "row 'a' is in shards 0 and 1"),
    ("other_config", r"run under another configuration .* \(differs in views\)"),
    ("no_result", "no result for example 'd', method 'random'; rerun shard 1"),
    ("foreign_result", "example 'a' is not in shard 1's slice"),
])
def test_merge_refusals(tmp_path, case, message):
    runs = tmp_path / "runs"
    dirs = [_fake_shard(runs, 0, 2, ["a", "c"])]
    if case == "twice":
        dirs.append(_fake_shard(runs / "again", 0, 2, ["a", "c"]))
    elif case == "overlap":
        dirs.append(_fake_shard(runs, 1, 2, ["b", "a"]))
    elif case != "missing":
        records = {"no_result": [{"example_id": "b", "method": "random"}],
                   "foreign_result": [{"example_id": "a", "method": "random"}]}.get(case)
        dirs.append(_fake_shard(runs, 1, 2, ["b", "d"], finished=case != "unfinished", records=records,
                                config={"views": ["row"]} if case == "other_config" else None))
    with pytest.raises(DataError, match=message):
        merge_run(dirs, tmp_path / "merged")
    assert not (tmp_path / "merged" / RESULTS).exists()  # nothing half-merged


def shard_cfg(tmp_path, *overrides):
    return run_cfg(tmp_path, "dataset.num_samples=3", "max_examples=3", "attribution=[random,attention]",
                   "mode=[faithfulness,recovery]", "views=[seq]", "heatmaps=2", "save_traces=true",
                   "mode.faithfulness.steps=4", *overrides)  # what is merged matters here, not the curve's resolution


@pytest.mark.slow
def test_shards_merged_equal_the_unsharded_run(tmp_path):
    whole = tmp_path / "whole"
    run_stage(shard_cfg(tmp_path), whole)
    shards = []
    for i in range(2):  # 3 examples: shard 0 gets rows 0 and 2, shard 1 row 1
        d = tmp_path / "sweep" / f"{i}_shard.index={i}"
        out = run_stage(shard_cfg(tmp_path, f"shard.index={i}", "shard.count=2"), d)
        assert out == {"shard": [i, 2], "examples": 2 - i} and not (d / "summary.json").exists()
        shards.append(d)
    merged = tmp_path / "merged"
    run_stage(shard_cfg(tmp_path, f"merge=[{tmp_path / 'sweep'}]"), merged)

    def lines(d):
        return [without_timings(json.loads(x)) for x in (d / RESULTS).read_text().splitlines()]

    assert lines(merged) == lines(whole) and len(lines(whole)) == 6
    a, b = (json.loads((d / "summary.json").read_text()) for d in (whole, merged))
    assert without_timings(a) == without_timings(b)
    for d in (whole, merged):  # the summary's s/example column is a timing: compare the rest of each table row
        assert (d / "summary.md").exists() and (d / "report.html").exists()
    assert sorted(p.name for p in (merged / "heatmaps" / "random").iterdir()) == \
        sorted(p.name for p in (whole / "heatmaps" / "random").iterdir())
    assert sorted(p.name for p in (merged / "heatmap_data").iterdir()) == \
        sorted(p.name for p in (whole / "heatmap_data").iterdir())
    trace_ids = [json.loads(x)["example_id"] for x in (merged / "traces" / "attention" / "manifest.jsonl").open()]
    whole_traces = whole / "traces" / "attention" / "manifest.jsonl"
    assert trace_ids == [json.loads(x)["example_id"] for x in whole_traces.open()]

    # The report reads the sharded sweep (merging it) like the unsharded run.
    from omegaconf import OmegaConf

    from ctxbench.stages.report import report_stage

    def table(runs, out):
        cfg = OmegaConf.create({"runs": runs, "view": "seq", "html": False, "heatmaps": 0})
        report_stage(cfg, out)
        return without_time_section((out / "table1.md").read_text())

    assert table([str(tmp_path / "sweep")], tmp_path / "rep_sharded") == table([str(whole)], tmp_path / "rep_whole")

    # A shard left unfinished is refused by name.
    (shards[1] / "shard.json").unlink()
    with pytest.raises(DataError, match="shard 1 of 2 is unfinished"):
        run_stage(shard_cfg(tmp_path, f"merge=[{tmp_path / 'sweep'}]"), tmp_path / "merged2")
    shutil.rmtree(tmp_path / "merged2", ignore_errors=True)


def _base(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.mark.parametrize("case, message", [
    ("in_both", r"example 'a', method 'random' is in the base \(.*\) too"),
    ("twice_in_base", "example 'b', method 'random' twice"),
    ("not_the_runs", "example 'z', method 'random' is not one of the merged run's"),
    ("other_settings", r"method 'random' made under other settings than in .* \(f2 != f1\)"),
    ("no_base", "no results.jsonl there"),
])
def test_merge_with_a_base_refusals(tmp_path, case, message):
    """The base's lines and the shards' are one run: each example and method once, one configuration per method."""
    runs = tmp_path / "runs"
    line = {"method": "random", "config": "f1"}
    base_recs = {"in_both": [{"example_id": "a", **line}],
                 "twice_in_base": [{"example_id": "b", **line}, {"example_id": "b", **line}],
                 "not_the_runs": [{"example_id": "z", **line}],
                 "other_settings": [{"example_id": "b", **line}]}.get(case)
    base = _base(tmp_path / "task", base_recs) if base_recs is not None else tmp_path / "nothing"
    shard1 = [{"example_id": "d", "method": "random", "config": "f2" if case == "other_settings" else "f1"}]
    if case not in ("other_settings",):
        shard1 = [{"example_id": "b", **line}] + shard1
    dirs = [_fake_shard(runs, 0, 2, ["a", "c"], records=[{"example_id": e, **line} for e in ("a", "c")]),
            _fake_shard(runs, 1, 2, ["b", "d"], records=shard1)]
    with pytest.raises(DataError, match=message):
        merge_run(dirs, tmp_path / "merged", base=base)
    assert not (tmp_path / "merged" / RESULTS).exists()


@pytest.mark.slow
def test_a_split_lane_folds_back_into_its_task_folder(tmp_path):
    """A task folder holds 2 of 5 examples; two shards with base= score only the 3 it lacks (the one command the
    issue asked for, no copying of lines by hand), and merge=[...] base= into the task folder itself leaves it equal
    to one unsplit run of the 5."""
    def cfg(*more):
        return run_cfg(tmp_path, "dataset.num_samples=5", "attribution=[random,position]", "mode=[recovery]",
                       "views=[seq]", "heatmaps=0", "html=false", *more)

    whole = tmp_path / "whole"
    run_stage(cfg("max_examples=5"), whole)
    task = tmp_path / "task"
    run_stage(cfg("max_examples=2"), task)  # the lane as far as it got
    before = (task / RESULTS).read_text()
    for i in range(2):
        d = tmp_path / "split" / f"{i}"
        run_stage(cfg("max_examples=5", f"shard.index={i}", "shard.count=2", f"base={task}"), d)
        ids = sorted({json.loads(x)["example_id"] for x in (d / RESULTS).read_text().splitlines()})
        assert ids == sorted({"niah_mq_q2/2", "niah_mq_q2/3", "niah_mq_q2/4"} & {f"niah_mq_q2/{j}"
                                                                                    for j in range(i, 5, 2)})
    assert (task / RESULTS).read_text() == before  # the shards only read the base
    run_stage(cfg("max_examples=5", f"merge=[{tmp_path / 'split'}]", f"base={task}"), task)

    def lines(d):
        return [without_timings(json.loads(x)) for x in (d / RESULTS).read_text().splitlines()]

    assert lines(task) == lines(whole) and len(lines(task)) == 10
    assert without_timings(json.loads((task / "summary.json").read_text())) == \
        without_timings(json.loads((whole / "summary.json").read_text()))
    with pytest.raises(ConfigError, match=r"base=.*: a base is for the shards of a split lane"):
        run_stage(cfg("max_examples=5", f"base={task}"), tmp_path / "unsplit")
