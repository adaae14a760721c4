#!/usr/bin/env bash
# The FlashTrace paper's Table 1 (ICML 2026) on SmolLM2, in three variants, each in lanes that resume where they
# stopped (docs/attribution.md, "Table 1"): on a CPU it takes days, so its results live in runs/table1/ and are
# committed as they come.
#
#   bash scripts/table1.sh [VARIANT] LANE [hydra overrides]
#
# VARIANT (default gold):
#   gold          gold continuation, no CoT: RULER's answer prefix + answer explained straight from the raw data
#   cot_self      self-generated CoT: SmolLM2 writes CoT + \box{answer} through the sampling stage, the rule judge
#                 keeps the correct ones, and those caches are explained (the paper's two-stage protocol)
#   cot_evidence  evidence CoT (labelled synthetic): the evidence sentences restated in order, then the boxed answer
#                 sentence, through the same sampling stage (generator=evidence_cot), then explained
# LANE:
#   sample        (cot_* only) sample_and_filter over the tasks: caches in <variant>/samples/, funnel.json per task
#   faith         the seven methods other than IG (another model: the five of the family comparison, FlashTrace,
#                 per-token IFR, attention, perturbation, AttnLRP; TABLE1_METHODS sets them): faithfulness (with every
#                 method also under the common deletion sets all / nonstop, cot_* only) and recovery (FlashTrace with
#                 hops=1, the Table-1 figure)
#   ig            integrated gradients (the long pole; it may run on fewer examples: TABLE1_IG_EXAMPLES)
#   controls      the model-free controls (copy_match, position, random, length) on recovery: no model weights loaded
#   faith_common  FlashTrace's faithfulness under the common deletion sets all / nonstop, where the faith lane did
#                 not score them (gold): the headline compares every row under one set
#   controls_faith  the same controls' faithfulness, as the faith lane scores every method (the model is loaded)
#   lds           the set-free scorers, LDS and top-k drop (mode=[lds,topk]), for the controls and the methods
#                 cheapest first (TABLE1_LDS_METHODS sets them): one set of sentence ablations per example shared by
#                 every method, kept in each job's ablations/ folder
#   rec           FlashTrace's recovery alone: hops=3 (a labelled sensitivity row), and for gold also hops=1 with the
#                 stop-token recall (gold's faith lane predates it)
#   report        the variant's table in the paper's layout, intervals, orderings, funnel: <variant>/report/
#   compare       (no variant) the variants' reports beside the paper's Table 1: runs/table1/variants/variants.md
#   overview      (no variant) every report's headline in orders and verdicts, from its table1.json alone:
#                 runs/table1/overview/overview.md
#   families      (no variant; TABLE1_MODEL set) each variant's report of TABLE1_MODEL beside SmolLM2's: which
#                 method orderings hold in both models, <TABLE1_DIR>/<model>/families/<variant>/families.md
#
# TABLE1_DIR (runs/table1), TABLE1_TASKS, TABLE1_EXAMPLES (kept examples per task, 20), TABLE1_ROWS (rows the
# sampling stage may try per task, 80), TABLE1_IG_EXAMPLES; PYTHON, the interpreter (.venv's); TABLE1_MODEL, another
# option of conf/model (e.g. gemma3-270m): its lanes and reports go to <TABLE1_DIR>/<model>/ (SmolLM2's stay where
# they are), its RULER data, fitted to its tokenizer, to data/<model>/. The lanes set one
# thread each unless OMP_NUM_THREADS is set (two lanes side by side on 2 cores do about 1.3x the work of one on both).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TABLE1_DIR:-runs/table1}
top=$out  # SmolLM2's folders, which the families lane sets another model's beside
model=${TABLE1_MODEL:-smollm2-135m}
who=SmolLM2  # in the report's caption
methods=ifr_multi_hop_both,ifr_multi_hop,ft_attnlrp,ifr_all_positions,attention,attnlrp,perturbation
# another family: the methods the family comparison sets side by side (on Gemma 3 each method takes minutes per
# example on a CPU core: 21 deletion passes per view and deletion set through a 262k-token vocabulary)
[ "$model" = smollm2-135m ] || { out=$out/$model; who=$model; methods=ifr_multi_hop_both,ifr_all_positions,attention,attnlrp,perturbation; }
methods=${TABLE1_METHODS:-$methods}
# the LDS lane: cheap methods and the controls first, so that a lane stopped early still compares them on the same
# examples; AttnLRP and perturbation last (minutes per example on a CPU core)
lds_methods=${TABLE1_LDS_METHODS:-ifr_multi_hop_both,copy_match,position,random,length,attention,ifr_all_positions,context_cite,attnlrp,perturbation}
tasks=${TABLE1_TASKS:-niah_mq_q2,niah_mv_v2,vt_h2_c3}
n=${TABLE1_EXAMPLES:-20}
n_ig=${TABLE1_IG_EXAMPLES:-$n}
rows=${TABLE1_ROWS:-80}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
py=${PYTHON:-.venv/bin/python}
fail() { echo "error: scripts/table1.sh: $*" >&2; exit 2; }
# the table pairs each method with FlashTrace; a lane without it (a served model's black-box methods) pairs them all
pairs_of() { case ",$1," in *,ifr_multi_hop_both,*) ;; *) echo stats.baseline=null ;; esac; }
variant=gold
case ${1:-} in gold|cot_self|cot_evidence) variant=$1; shift ;; esac
lane=${1:-}
[ -n "$lane" ] || fail "usage: bash scripts/table1.sh [gold|cot_self|cot_evidence] sample|faith|faith_common|ig|controls|controls_faith|lds|rec|report|compare|overview|families"
shift
# gold keeps the folders it was first run in (runs/table1/faith_rec, ...); each CoT variant has a folder of its own
vdir=$out; [ "$variant" = gold ] || vdir=$out/$variant
case $variant in
  gold) caption="gold continuation, no CoT: the RULER answer prefix and answer explained from the raw data" ;;
  cot_self) caption="self-generated CoT: $who's CoT + boxed answer from the sampling stage, judged correct (rule judge)" ;;
  cot_evidence) caption="evidence CoT (labelled synthetic): the evidence sentences restated in order, then the boxed answer sentence" ;;
esac
# paths relative to the project root, so that the committed manifests name no machine's folders
common=(paths.root=.)
# another family's RULER data is generated to its own tokenizer's lengths, in a folder of its own
[ "$model" = smollm2-135m ] || common+=("model=$model" "paths.data_dir=data/$model")
# one folder per task, named by the task alone (not the lane's methods, nor its place in TABLE1_TASKS): a rerun, or a
# second lane on other tasks (TABLE1_TASKS=vt_h2_c3 bash scripts/table1.sh ig), finds it again
sub() { echo "hydra.sweep.subdir=\"dataset=\${hydra:runtime.choices.dataset},max_examples=$1\""; }
run=(-m +experiment=table1 "dataset=$tasks" "${common[@]}")
faith_sets=()
if [ "$variant" != gold ] && [ "$lane" != sample ] && [ "$lane" != report ]; then
  # explain the variant's caches (the sampled cache wins over the raw data); refuse to start without them, so that
  # no lane falls back to the raw gold targets; a task whose cache kept no row is left out (its report lists it)
  kept=""
  for t in ${tasks//,/ }; do
    [ -f "$vdir/samples/$t.jsonl" ] || fail "no cache $vdir/samples/$t.jsonl: run 'bash scripts/table1.sh $variant sample' first"
    if [ -s "$vdir/samples/$t.jsonl" ]; then kept+="${kept:+,}$t"; else echo "table1.sh: $t: no row kept by the sampling stage, left out" >&2; fi
  done
  [ -n "$kept" ] || fail "no task of $tasks kept a row in the sampling stage ($vdir/samples)"
  run=(-m +experiment=table1 "dataset=$kept" "${common[@]}" "paths.samples_dir=$vdir/samples")
  # every method also under the common deletion sets (the lanes that score faithfulness)
  faith_sets=("mode.faithfulness.common_sets=[all,nonstop]")
fi
case $lane in
  sample)
    [ "$variant" != gold ] || fail "the gold variant has no sampling stage (its targets are RULER's gold answers)"
    # SmolLM2's CoT capped at 256 new tokens (a CPU budget; the box guard still closes an open box); its in-context
    # examples ranked on the whole prompt, as when the committed caches were made (the option reads
    # [question, context] since)
    gen=(generator.max_new_tokens=256 'retriever.fields=[prompt]')
    [ "$variant" = cot_evidence ] && gen=(generator=evidence_cot retriever=zero)
    exec "$py" exp/exp2/sample_and_filter.py -m "dataset=$tasks" length=1024 "max_examples=$n" "max_rows=$rows" \
      "${common[@]}" "paths.samples_dir=$vdir/samples" hydra.sweep.dir="$vdir/sample" \
      "hydra.sweep.subdir=\"dataset=\${hydra:runtime.choices.dataset}\"" "${gen[@]}" "$@" ;;
  faith)
    exec "$py" exp/exp2/run_exp.py "${run[@]}" ${faith_sets[@]+"${faith_sets[@]}"} "max_examples=$n" "$(sub "$n")" \
      hydra.sweep.dir="$vdir/faith_rec" \
      "attribution=[$methods]" $(pairs_of "$methods") "$@" ;;
  ig)
    # no FlashTrace in this lane to pair against; the report pairs across the folders. An example's sum over the
    # integration points is kept after each batch (partial/, git-ignored: it stays on the machine that ran it), so a
    # lane stopped mid-example resumes there
    exec "$py" exp/exp2/run_exp.py "${run[@]}" ${faith_sets[@]+"${faith_sets[@]}"} "max_examples=$n_ig" "$(sub "$n_ig")" \
      hydra.sweep.dir="$vdir/ig" \
      'attribution=[integrated_gradients]' stats.baseline=null \
      "attribution.integrated_gradients.partial_dir=$vdir/ig/partial" "$@" ;;
  controls)
    exec "$py" exp/exp2/run_exp.py "${run[@]}" "max_examples=$n" "$(sub "$n")" hydra.sweep.dir="$vdir/controls" \
      'attribution=[copy_match,position,random,length]' mode=recovery stats.baseline=null "$@" ;;
  faith_common)
    # RISE / MAS of the methods whose own deletion set is not `all` (FlashTrace: non-stop tokens only) under both
    # common sets, for a faith lane run before common sets were scored (gold): every other method's own set is
    # `all`, so its RISE@all is its main figure; the report takes FlashTrace's faithfulness from here (prefer_later)
    exec "$py" exp/exp2/run_exp.py "${run[@]}" "max_examples=$n" "$(sub "$n")" hydra.sweep.dir="$vdir/faith_common" \
      'attribution=[ifr_multi_hop_both]' mode=faithfulness 'mode.faithfulness.common_sets=[all,nonstop]' \
      stats.baseline=null "$@" ;;
  controls_faith)
    exec "$py" exp/exp2/run_exp.py "${run[@]}" ${faith_sets[@]+"${faith_sets[@]}"} "max_examples=$n" "$(sub "$n")" \
      hydra.sweep.dir="$vdir/controls_faith" 'attribution=[copy_match,position,random,length]' mode=faithfulness \
      stats.baseline=null "$@" ;;
  lds)
    exec "$py" exp/exp2/run_exp.py "${run[@]}" "max_examples=$n" "$(sub "$n")" hydra.sweep.dir="$vdir/lds" \
      "attribution=[$lds_methods]" 'mode=[lds,topk]' $(pairs_of "$lds_methods") "$@" ;;
  rec)
    hops=(3); [ "$variant" = gold ] && hops=(1 3)
    for k in "${hops[@]}"; do
      "$py" exp/exp2/run_exp.py "${run[@]}" "max_examples=$n" "$(sub "$n")" hydra.sweep.dir="$vdir/rec_h$k" \
        'attribution=[ifr_multi_hop_both]' "attribution.ifr_multi_hop_both.hops=$k" mode=recovery "$@"
    done ;;
  report)
    runs=""
    [ -d "$vdir/faith_rec" ] && runs="$vdir/faith_rec"
    [ -d "$vdir/faith_common" ] && runs+="${runs:+,}$vdir/faith_common"
    [ -d "$vdir/ig" ] && runs+="${runs:+,}$vdir/ig"
    # gold: FlashTrace's stop-token recall (hops=1) replaces the faith lane's all-token one (prefer_later); hops=3 is
    # a row of its own, labelled by its setting
    [ "$variant" = gold ] && [ -d "$vdir/rec_h1" ] && runs+="${runs:+,}$vdir/rec_h1"
    [ -d "$vdir/rec_h3" ] && runs+="${runs:+,}$vdir/rec_h3"
    # the controls' recovery and every method's LDS and top-k drop: rows and columns of the same table
    for lane_dir in controls controls_faith lds; do [ -d "$vdir/$lane_dir" ] && runs+="${runs:+,}$vdir/$lane_dir"; done
    samples=(); [ "$variant" = gold ] || samples=("samples=[$vdir/samples]")
    # IG may run on fewer examples than the other methods (the paper's protocol), its n shown
    exec "$py" exp/exp2/report.py "runs=[$runs]" prefer_later=true paper=true unfinished=true min_examples=10 \
      +min_examples_of.integrated_gradients=3 \
      "caption=\"$caption\"" hydra.run.dir="$vdir/report" ${samples[@]+"${samples[@]}"} "$@" ;;
  compare)
    reports=""
    for v in report cot_self/report cot_evidence/report; do [ -f "$out/$v/table1.json" ] && reports+="${reports:+,}$out/$v"; done
    [ -n "$reports" ] || fail "no variant's report yet (bash scripts/table1.sh <variant> report)"
    exec "$py" exp/exp2/report.py 'runs=[]' "variants=[$reports]" hydra.run.dir="$out/variants" "$@" ;;
  overview)
    # every committed report's headline in orders and verdicts, rendered from its table1.json (the docs link here)
    reports=""
    for d in "$out"/report "$out"/cot_self/report "$out"/cot_evidence/report "$out"/*/report "$out"/*/cot_self/report \
             "$out"/*/cot_evidence/report; do  # SmolLM2's variants, then each other model's
      [ -f "$d/table1.json" ] || continue
      case ",$reports," in *",$d,"*) ;; *) reports+="${reports:+,}$d" ;; esac
    done
    [ -n "$reports" ] || fail "no report yet (bash scripts/table1.sh <variant> report)"
    exec "$py" exp/exp2/report.py 'runs=[]' "overview=[$reports]" hydra.run.dir="$out/overview" "$@" ;;
  families)
    [ "$model" != smollm2-135m ] || fail "families sets another model's reports beside SmolLM2's: set TABLE1_MODEL"
    found=""
    for v in report cot_self/report cot_evidence/report; do
      [ -f "$top/$v/table1.json" ] && [ -f "$out/$v/table1.json" ] || continue
      name=${v%/report}; [ "$name" = report ] && name=gold
      "$py" exp/exp2/report.py 'runs=[]' "families=[$top/$v,$out/$v]" hydra.run.dir="$out/families/$name" "$@"
      found=1
    done
    [ -n "$found" ] || fail "no variant with a report for both SmolLM2 and $model (bash scripts/table1.sh <variant> report)" ;;
  *)
    fail "unknown lane '$lane' (sample | faith | faith_common | ig | controls | controls_faith | lds | rec | report | compare | overview | families)" ;;
esac
