#!/usr/bin/env bash
# Trains a Q-learning agent with the project's own pipeline, on the fitted simulator
# (docs/sim.md, docs/rl.md): random-agent transitions, per-action model selection (5-fold
# CV), then fitted-Q pretraining and Q-learning episodes per phase, for every phase of the
# default set.
#   scripts/train-agent.sh [--force] [--scale thesis|quick] [OUT_DIR]   (default OUT_DIR:
#   python/nvmw/data/agents)
# --scale thesis (default) reproduces the shipped agent qlearning-optane-1dimm at the
#   thesis's scale (Madrid Rivera 2024, 3.4.3 and Appendix D): 150 random episodes per
#   phase, 5-fold CV over the 72 points of Table D.1 around Table D.2's choices (`nvmw tune
#   --grid thesis`; NVMW_TUNE_GRID=full for all 1,296, hours) on a seeded subset of
#   NVMW_TUNE_MAX_SAMPLES transitions per action, then 700 Q-learning episodes per phase,
#   the models learning symlog(reward) and exploring at least 10 % of steps (docs/rl.md,
#   "The reward the models learn from"), all at 1 s windows, episodes on two local worker processes (or Ray:
#   NVMW_TRAIN_BACKEND=ray, NVMW_RAY_ADDRESS for a cluster) with one batched update per
#   episode: about 15 minutes on 2 cores. Writes its learning curves to
#   docs/rl-learning-curve-thesis.png.
# --scale quick is the earlier, smaller recipe (qlearning-optane-1dimm-quick): 150 random
#   episodes per phase, 16-point grid, 20 Q-learning episodes per phase, 0.1 s windows,
#   raw rewards.
#   Its agent met both SLAs on far fewer steps (docs/rl.md); kept for comparison.
# Both write the wall time of every step to $work/timing.json.
# Each step keeps its output in the work directory ($NVMW_TRAIN_WORK, default
# build/train-agent-thesis or build/train-agent-quick) and is skipped when that output exists, so
# an interrupted run resumes; --force redoes every step. The agent and its tuned
# parameters are then copied to OUT_DIR.
# Knobs (environment): NVMW_COLLECT_EPISODES (150), NVMW_TRAIN_EPISODES (700; quick 20),
# NVMW_FQI_ITERATIONS (2; quick 10), NVMW_REWARD_TRANSFORM (symlog; quick none, the raw reward, as the thesis), NVMW_EPSILON_MIN (0.1; quick 0), NVMW_TUNE_CV (5), NVMW_TUNE_GRID (thesis; quick: the
# 16-point grid), NVMW_TUNE_MAX_SAMPLES (2000),
# NVMW_TRAIN_SLA (calibrated-optane-1dimm), NVMW_TRAIN_SIM_PARAMS (the shipped fit for
# optane-1dimm), NVMW_TRAIN_WORKERS (2; quick 1), NVMW_TRAIN_BACKEND (local), NVMW_RAY_ADDRESS,
# NVMW_TRAIN_CURVE (thesis: docs/rl-learning-curve-thesis.png), NVMW_TRAIN_TUNED (a
# `nvmw tune` result to use instead of tuning, e.g. a previous agent's .tuned.json).
# Needs the package installed (scripts/setup.sh) or NVMW_DEV_CORE_DIR/PYTHONPATH set.
set -euo pipefail
cd "$(dirname "$0")/.."
force=0
scale=thesis
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) force=1; shift ;;
    --scale) scale=${2:?--scale needs thesis or quick}; shift 2 ;;
    --scale=*) scale=${1#--scale=}; shift ;;
    *) break ;;
  esac
done
out=${1:-python/nvmw/data/agents}
case "$scale" in
  thesis)
    name=qlearning-optane-1dimm; work=${NVMW_TRAIN_WORK:-build/train-agent-thesis}
    window=1.0; train_eps=${NVMW_TRAIN_EPISODES:-700}; fqi=${NVMW_FQI_ITERATIONS:-2}
    tune_grid=(--grid "${NVMW_TUNE_GRID:-thesis}" --max-samples "${NVMW_TUNE_MAX_SAMPLES:-2000}"); workers=${NVMW_TRAIN_WORKERS:-2}; update=episode
    curve=${NVMW_TRAIN_CURVE:-docs/rl-learning-curve-thesis.png}
    reward_transform=${NVMW_REWARD_TRANSFORM:-symlog} epsilon_min=${NVMW_EPSILON_MIN:-0.1} ;;
  quick)
    name=qlearning-optane-1dimm-quick; work=${NVMW_TRAIN_WORK:-build/train-agent-quick}
    window=0.1; train_eps=${NVMW_TRAIN_EPISODES:-20}; fqi=${NVMW_FQI_ITERATIONS:-10}
    tune_grid=(--quick); workers=${NVMW_TRAIN_WORKERS:-1}; update=step
    curve=${NVMW_TRAIN_CURVE:-$work/learning-curve.png}
    reward_transform=${NVMW_REWARD_TRANSFORM:-none} epsilon_min=${NVMW_EPSILON_MIN:-0} ;;
  *) echo "train-agent.sh: --scale must be thesis or quick, not $scale" >&2; exit 2 ;;
esac
mkdir -p "$out" "$work"
if (( force )); then rm -f "$work/transitions.npz" "$work/$name.tuned.json" "$work/$name.joblib" "$work/timing.json"; fi
common=(--env sim --window "$window" --device optane-1dimm --sla "${NVMW_TRAIN_SLA:-calibrated-optane-1dimm}")
if [[ -n "${NVMW_TRAIN_SIM_PARAMS:-}" ]]; then common+=(--sim-params "$NVMW_TRAIN_SIM_PARAMS"); fi
backend=(--backend "${NVMW_TRAIN_BACKEND:-local}" --workers "$workers")
if [[ -n "${NVMW_RAY_ADDRESS:-}" ]]; then backend+=(--ray-address "$NVMW_RAY_ADDRESS"); fi

step() { echo "== $(date -u +%H:%M:%S) $*" >&2; }
t_all=$(date +%s.%N)
declare -A took
timed() {  # timed NAME CMD...: run CMD, remember its wall time
  local t0; t0=$(date +%s.%N); local label=$1; shift
  "$@"
  took[$label]=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
}

if [[ ! -s "$work/transitions.npz" ]]; then
  step "collect ($scale scale)"
  timed collect python3 -m nvmw collect "${common[@]}" "${backend[@]}" --episodes "${NVMW_COLLECT_EPISODES:-150}" \
    --steps 200 --seed 0 --out "$work/transitions.tmp.npz"
  mv "$work/transitions.tmp.npz" "$work/transitions.npz"
else step "collect: $work/transitions.npz exists, skipped"; fi

if [[ -n "${NVMW_TRAIN_TUNED:-}" && ! -s "$work/$name.tuned.json" ]]; then
  step "tune: model parameters from $NVMW_TRAIN_TUNED"
  cp "$NVMW_TRAIN_TUNED" "$work/$name.tuned.json"
fi
if [[ ! -s "$work/$name.tuned.json" ]]; then
  step "tune"
  timed tune python3 -m nvmw tune "$work/transitions.npz" "${tune_grid[@]}" --cv "${NVMW_TUNE_CV:-5}" --n-jobs 2 \
    --reward-transform "$reward_transform" --seed 0 --out "$work/$name.tuned.tmp.json"
  mv "$work/$name.tuned.tmp.json" "$work/$name.tuned.json"
else step "tune: $work/$name.tuned.json exists, skipped"; fi

if [[ ! -s "$work/$name.joblib" ]]; then
  step "train"
  timed train python3 -m nvmw train "${common[@]}" "${backend[@]}" --update "$update" \
    --transitions "$work/transitions.npz" --tuned "$work/$name.tuned.json" \
    --episodes "$train_eps" --fqi-iterations "$fqi" --reward-transform "$reward_transform" \
    --epsilon-min "$epsilon_min" --seed 0 \
    --out "$work/$name.tmp.joblib" --curve "$curve"
  mv "$work/$name.tmp.joblib" "$work/$name.joblib"
  mv "$work/$name.tmp.policy.json" "$work/$name.policy.json"
else step "train: $work/$name.joblib exists, skipped"; fi

cp "$work/$name.tuned.json" "$out/$name.tuned.json"
cp "$work/$name.joblib" "$out/$name.joblib"
# Its greedy policy beside it (what acting greedily loads without scikit-learn; docs/rl.md).
python3 -c "import sys; from nvmw.rl.agent import export_policy_file; export_policy_file(sys.argv[1])" "$out/$name.joblib"
total=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t_all" "$(date +%s.%N)")
python3 - "$work/timing.json" "$scale" "$total" "${took[collect]:-skipped}" "${took[tune]:-skipped}" \
  "${took[train]:-skipped}" <<'EOF'
import json, os, sys
path, scale, total, collect, tune, train = sys.argv[1:]
num = lambda v: None if v == "skipped" else float(v)
with open("/proc/loadavg") as fh:
    load = fh.read().split()[:3]
json.dump({"scale": scale, "wall_s": {"total": float(total), "collect": num(collect), "tune": num(tune),
                                      "train": num(train)},
           "cores": os.cpu_count(), "loadavg_at_end": load}, open(path, "w"), indent=2)
EOF
step "agent: $out/$name.joblib (learning curves: $curve; wall time ${total} s, steps in $work/timing.json)"
