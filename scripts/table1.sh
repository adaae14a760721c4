#!/usr/bin/env bash
# The paper's Table 1 on SmolLM2 (docs/attribution.md, "The Table-1 run on a CPU"), in lanes that resume where they
# stopped: on a CPU it takes days, so its results live in runs/table1/ and are committed as they come.
#
#   bash scripts/table1.sh faith    # the seven methods other than IG, faithfulness and recovery
#   bash scripts/table1.sh ig       # integrated gradients (the long pole), at the same time on a 2-core machine
#                                   # (once faith is done: one ig lane per core, each with its own TABLE1_TASKS)
#   bash scripts/table1.sh rec      # FlashTrace's recovery with hops=3, Table 1's setting (minutes)
#   bash scripts/table1.sh report   # the table in the paper's layout, intervals and orderings: runs/table1/report/
#
# Any further argument is a Hydra override (e.g. model.device=cuda). TABLE1_DIR, TABLE1_TASKS and TABLE1_EXAMPLES
# change where, which tasks and how many examples; PYTHON, the interpreter (.venv's). The lanes set one thread each
# unless OMP_NUM_THREADS is set (two lanes side by side on 2 cores do about 1.3x the work of one on both).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TABLE1_DIR:-runs/table1}
tasks=${TABLE1_TASKS:-niah_mq_q2,niah_mv_v2,vt_h2_c3}
n=${TABLE1_EXAMPLES:-20}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
py=${PYTHON:-.venv/bin/python}
lane=${1:?usage: bash scripts/table1.sh faith|ig|rec|report [hydra overrides]}
shift
# one folder per task, named by the task alone (not the lane's methods, nor its place in TABLE1_TASKS): a rerun, or a
# second lane on other tasks (TABLE1_TASKS=vt_h2_c3 bash scripts/table1.sh ig), finds it again
sweep=(-m +experiment=table1 "dataset=$tasks" "max_examples=$n"
       "hydra.sweep.subdir=\"dataset=\${hydra:runtime.choices.dataset},max_examples=$n\"")
case $lane in
  faith)
    exec "$py" exp/exp2/run_exp.py "${sweep[@]}" hydra.sweep.dir="$out/faith_rec" \
      'attribution=[ifr_multi_hop_both,ifr_multi_hop,ft_attnlrp,ifr_all_positions,attention,attnlrp,perturbation]' "$@" ;;
  ig)
    # no FlashTrace in this lane to pair against; the report pairs across the folders
    exec "$py" exp/exp2/run_exp.py "${sweep[@]}" hydra.sweep.dir="$out/ig" \
      'attribution=[integrated_gradients]' stats.baseline=null "$@" ;;
  rec)
    exec "$py" exp/exp2/run_exp.py "${sweep[@]}" hydra.sweep.dir="$out/rec_k3" \
      'attribution=[ifr_multi_hop_both]' attribution.ifr_multi_hop_both.hops=3 mode=recovery "$@" ;;
  report)
    # rec_k3 last: with prefer_later its FlashTrace recovery replaces the hops=1 one of faith_rec
    exec "$py" exp/exp2/report.py "runs=[$out/faith_rec,$out/ig,$out/rec_k3]" prefer_later=true paper=true \
      unfinished=true hydra.run.dir="$out/report" "$@" ;;
  *)
    echo "error: scripts/table1.sh: unknown lane '$lane' (faith | ig | rec | report)" >&2; exit 2 ;;
esac
