#!/usr/bin/env bash
# The GPU checks of docs/scale-out.md in one go (a few minutes on one GPU), each printing its figures and PASS/FAIL:
#   1. bf16 forward of SmolLM2 on the GPU against fp32 on the CPU (next-token agreement, log-prob error);
#   2. run_exp (ifr_multi_hop + random, faithfulness + recovery, 2 niah_mq_q2 examples at 512 tokens) on the GPU in
#      fp32 against the CPU: hop vectors and metrics agree; the same job with model.dtype=bf16 and device_map=auto runs;
#   3. Faiss on the GPU against the CPU (flat: same neighbours; ivf: recall against flat), or a plain "no GPU faiss";
#   4. deletion passes sized to memory: with the GPU's memory capped, a batch of 64 long sequences halves until it
#      fits and scores as batch 1 does;
#   5. ablation passes from the intact input's shared prefix (perturbation, ContextCite) on the GPU, fp32 and bf16:
#      the logits against whole passes (bf16: within twice its own distance from fp32), and the time of 64 leave-one-sentence-out ablations with and without it.
# Usage: bash bench/gpu_check.sh [workdir]   (outputs under workdir, default a new temporary folder)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=${1:-$(mktemp -d /tmp/gpu_check.XXXX)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} HYDRA_FULL_ERROR=1
PATHS=(paths.data_dir="$WORK/data" paths.samples_dir="$WORK/samples" paths.model_cache_dir="$PWD/.cache")
JOB=(dataset=niah_mq_q2 length=512 max_examples=2 dataset.num_samples=2 "attribution=[ifr_multi_hop,random]"
     "mode=[faithfulness,recovery]" "views=[seq]" html=false heatmaps=0 save_traces=true progress=false)
status=0
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('GPU:', torch.cuda.get_device_name(0), 'torch', torch.__version__)" || exit 1

echo "== 1. bf16 forward vs fp32 CPU"
"$PY" - <<'EOF' || status=1
import torch
from ctxbench.models import ModelConfig, load_causal_lm
cpu = load_causal_lm(ModelConfig(device="cpu", dtype="float32"), cache_dir=".cache")
gpu = load_causal_lm(ModelConfig(device="cuda", dtype="bf16"), cache_dir=".cache")
ids = cpu.tokenizer("The capital of France is Paris. The capital of Italy is Rome. " * 20, return_tensors="pt").input_ids
with torch.no_grad():
    a = torch.log_softmax(cpu.model(ids).logits.double(), -1)[0]
    b = torch.log_softmax(gpu.model(ids.cuda()).logits.double(), -1)[0].cpu()
agree = (a.argmax(-1) == b.argmax(-1)).double().mean().item()
err = (a - b).abs().max(-1).values.median().item()
print(f"bf16 {gpu.model.dtype} on {gpu.device}: next-token argmax agreement {agree:.3f}, median max |dlogp| {err:.3f}")
assert agree > 0.9, "bf16 disagrees with fp32 on most next tokens"
print("PASS")
EOF

echo "== 2. run_exp on GPU (fp32, bf16, device_map=auto) vs CPU"
for v in cpu:float32 cuda:float32 cuda:bf16; do
  dev=${v%%:*}; dt=${v##*:}
  "$PY" exp/exp2/run_exp.py "${JOB[@]}" "${PATHS[@]}" model.device=$dev model.dtype=$dt \
    hydra.run.dir="$WORK/run_${dev}_${dt}" > "$WORK/run_${dev}_${dt}.log" 2>&1 || { echo "FAIL run $v (log $WORK/run_${dev}_${dt}.log)"; status=1; }
done
"$PY" exp/exp2/run_exp.py "${JOB[@]}" "${PATHS[@]}" model.device_map=auto model.dtype=bf16 \
  hydra.run.dir="$WORK/run_device_map" > "$WORK/run_device_map.log" 2>&1 && echo "device_map=auto: ran" \
  || { echo "FAIL device_map=auto (log $WORK/run_device_map.log)"; status=1; }
"$PY" - "$WORK" <<'EOF' || status=1
import json, sys
from pathlib import Path
import numpy as np
work = Path(sys.argv[1])
def load(name):
    d = work / name
    recs = {(r["method"], r["example_id"]): r for r in map(json.loads, (d / "results.jsonl").read_text().splitlines())}
    traces = {}
    for line in (d / "traces" / "ifr_multi_hop" / "manifest.jsonl").read_text().splitlines():
        t = json.loads(line)
        traces[t["example_id"]] = np.load(d / "traces" / "ifr_multi_hop" / t["file"])["hop_vectors"]
    return recs, traces
cpu, cpu_t = load("run_cpu_float32")
for name, tol in (("run_cuda_float32", 0.999), ("run_cuda_bf16", 0.95)):
    gpu, gpu_t = load(name)
    corr = min(np.corrcoef(cpu_t[e].ravel(), gpu_t[e].ravel())[0, 1] for e in cpu_t)
    rec = max(abs(cpu[k]["recovery"]["seq"] - gpu[k]["recovery"]["seq"]) for k in cpu)
    rise = max(abs(cpu[k]["faithfulness"]["seq"]["RISE"] - gpu[k]["faithfulness"]["seq"]["RISE"]) for k in cpu)
    print(f"{name}: IFR hop vectors min correlation with CPU {corr:.5f}; max |d recall| {rec:.3f}; max |d RISE| {rise:.3f}")
    assert corr >= tol, f"{name}: IFR on the GPU disagrees with the CPU"
print("PASS")
EOF

echo "== 3. Faiss GPU vs CPU"
"$PY" - <<'EOF' || status=1
import numpy as np
from ctxbench.retrievers.ann import IndexSettings, build_index, gpu_count
if gpu_count() == 0:
    print("faiss has no GPU support here (faiss-cpu); device=cuda falls back to the CPU. Install faiss-gpu to check.")
else:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200000, 128)).astype(np.float32); x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:500] + 0.1 * rng.standard_normal((500, 128)).astype(np.float32)
    _, a = build_index(x, IndexSettings("flat")).search(q, 10)
    _, b = build_index(x, IndexSettings("flat", device="cuda")).search(q, 10)
    _, c = build_index(x, IndexSettings("ivf", device="cuda")).search(q, 10)
    same = np.mean([len(set(i) & set(j)) / 10 for i, j in zip(a, b)])
    rec = np.mean([len(set(i) & set(j)) / 10 for i, j in zip(a, c)])
    print(f"flat GPU vs CPU overlap@10 {same:.4f}; ivf GPU recall@10 vs flat {rec:.3f}")
    assert same > 0.999 and rec > 0.8
print("PASS")
EOF

echo "== 4. deletion passes sized to memory"
"$PY" - <<'EOF' || status=1
import logging, torch
from ctxbench.metrics.faithfulness import sequence_logprobs
from ctxbench.models import ModelConfig, load_causal_lm
logging.basicConfig(level=logging.WARNING)
lm = load_causal_lm(ModelConfig(device="cuda", dtype="float32"), cache_dir=".cache")
seqs = torch.randint(100, 20000, (64, 4096))
small = sequence_logprobs(lm.model, seqs[:4], 4000, batch_size=1)
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
# Leave the model plus ~3 GB: 64 x 4096 tokens x 49k vocab logits would need far more, so the batch must halve.
cap = (torch.cuda.memory_allocated() + 3 * 2**30) / total
torch.cuda.set_per_process_memory_fraction(cap)
big = sequence_logprobs(lm.model, seqs, 4000, batch_size=64)
print(f"memory capped at {cap:.3f} of {total / 2**30:.0f} GiB; first 4 scores vs batch 1: max |d| {abs(big[:4] - small).max():.2e}")
assert abs(big[:4] - small).max() < 1e-2
print("PASS")
EOF

echo "== 5. ablation passes from the shared prefix"
"$PY" - <<'EOF' || status=1
import time, torch
from ctxbench.attribution.perturbation import ablated_token_scores
from ctxbench.models import ModelConfig, load_causal_lm
from ctxbench.models.attention import attention_kernel
from ctxbench.models.logits import intact_logits, predicting_logits, variant_logits
ref = None  # fp32 whole-pass logits: bf16 is held to its own distance from them
for dt in ("float32", "bf16"):
    lm = load_causal_lm(ModelConfig(device="cuda", dtype=dt), cache_dir=".cache")
    ids = lm.tokenizer("The grass is green. The sky is blue. " * 250, return_tensors="pt").input_ids[0, :2048].cuda()
    gen_start = 2000
    with torch.inference_mode(), attention_kernel(lm.model, "sdpa"):
        _, prefix = intact_logits(lm.model, gen_start, ids)
        seqs = ids.repeat(4, 1)
        for r, p in enumerate((300, 700, 1100, 1500)):
            seqs[r, p:p + 8] = 0
        full = predicting_logits(lm.model, gen_start, input_ids=seqs)
        err = (variant_logits(lm.model, gen_start, seqs, prefix) - full).abs().max().item()
    ref = full.cpu() if ref is None else ref
    own = (full.cpu() - ref).abs().max().item()  # 0 for fp32
    tol = max(1e-3, 2 * own)
    abl = [torch.arange(p, p + 8, device="cuda") for p in range(0, 1984, 31)]
    secs = {}
    for share in (False, True):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        ablated_token_scores(lm.model, ids, gen_start, abl, 0, 16, share_prefix=share)
        torch.cuda.synchronize(); secs[share] = time.perf_counter() - t0
    print(f"{dt}: shared prefix max |d logit| {err:.2e} (tolerance {tol:.2e}); {len(abl)} ablations at 2k: {secs[False]:.2f} s whole, "
          f"{secs[True]:.2f} s shared ({secs[True] / secs[False]:.2f}x)")
    assert err < tol, f"{dt}: the shared prefix changes the logits"
print("PASS")
EOF

echo "outputs: $WORK"
[ $status -eq 0 ] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
exit $status
