#!/usr/bin/env bash
# Reproduces the shipped Q-learning agent with the project's own pipeline, on the fitted
# simulator (docs/sim.md, docs/rl.md): random-agent transitions (thesis: 150 episodes per
# phase), per-action model selection (5-fold CV), then fitted-Q pretraining and Q-learning
# episodes per phase, for every phase of the default set.
#   scripts/train-agent.sh [--force] [OUT_DIR]     (default: python/nvmw/data/agents)
# Each step keeps its output in the work directory ($NVMW_TRAIN_WORK, default
# build/train-agent) and is skipped when that output exists, so an interrupted run resumes;
# --force redoes every step. The agent and its tuned parameters are then copied to OUT_DIR.
# Knobs (environment): NVMW_COLLECT_EPISODES (150), NVMW_TRAIN_EPISODES (20),
# NVMW_FQI_ITERATIONS (10), NVMW_TUNE_CV (5), NVMW_TRAIN_SLA (calibrated-optane-1dimm),
# NVMW_TRAIN_SIM_PARAMS (the shipped fit for optane-1dimm).
# Needs the package installed (scripts/setup.sh) or NVMW_DEV_CORE_DIR/PYTHONPATH set.
set -euo pipefail
cd "$(dirname "$0")/.."
force=0
if [[ "${1:-}" == "--force" ]]; then force=1; shift; fi
out=${1:-python/nvmw/data/agents}
work=${NVMW_TRAIN_WORK:-build/train-agent}
name=qlearning-optane-1dimm
mkdir -p "$out" "$work"
if (( force )); then rm -f "$work/transitions.npz" "$work/$name.tuned.json" "$work/$name.joblib"; fi
common=(--env sim --window 0.1 --device optane-1dimm --sla "${NVMW_TRAIN_SLA:-calibrated-optane-1dimm}")
if [[ -n "${NVMW_TRAIN_SIM_PARAMS:-}" ]]; then common+=(--sim-params "$NVMW_TRAIN_SIM_PARAMS"); fi

step() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

if [[ ! -s "$work/transitions.npz" ]]; then
  step "collect"
  python3 -m nvmw collect "${common[@]}" --episodes "${NVMW_COLLECT_EPISODES:-150}" --steps 200 --seed 0 \
    --out "$work/transitions.tmp.npz"
  mv "$work/transitions.tmp.npz" "$work/transitions.npz"
else step "collect: $work/transitions.npz exists, skipped"; fi

if [[ ! -s "$work/$name.tuned.json" ]]; then
  step "tune"
  python3 -m nvmw tune "$work/transitions.npz" --quick --cv "${NVMW_TUNE_CV:-5}" --n-jobs 2 --seed 0 \
    --out "$work/$name.tuned.tmp.json"
  mv "$work/$name.tuned.tmp.json" "$work/$name.tuned.json"
else step "tune: $work/$name.tuned.json exists, skipped"; fi

if [[ ! -s "$work/$name.joblib" ]]; then
  step "train"
  python3 -m nvmw train "${common[@]}" --transitions "$work/transitions.npz" --tuned "$work/$name.tuned.json" \
    --episodes "${NVMW_TRAIN_EPISODES:-20}" --fqi-iterations "${NVMW_FQI_ITERATIONS:-10}" --seed 0 \
    --out "$work/$name.tmp.joblib" --curve "$work/learning-curve.png"
  mv "$work/$name.tmp.joblib" "$work/$name.joblib"
else step "train: $work/$name.joblib exists, skipped"; fi

cp "$work/$name.tuned.json" "$out/$name.tuned.json"
cp "$work/$name.joblib" "$out/$name.joblib"
step "agent: $out/$name.joblib (learning curve: $work/learning-curve.png)"
