#!/usr/bin/env bash
# Reproduces the shipped Q-learning agent with the project's own pipeline, on the fitted
# simulator (docs/sim.md, docs/rl.md): random-agent transitions (thesis: 150 episodes per
# phase), per-action model selection (5-fold CV), then Q-learning episodes per phase.
#   scripts/train-agent.sh [OUT_DIR]     (default: python/nvmw/data/agents)
# Needs the package installed (scripts/setup.sh) or NVMW_DEV_CORE_DIR/PYTHONPATH set.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-python/nvmw/data/agents}
work=${NVMW_TRAIN_WORK:-build/train-agent}
mkdir -p "$out" "$work"
common=(--env sim --window 0.1 --device optane-1dimm --sla calibrated-optane-1dimm)
python3 -m nvmw collect "${common[@]}" --episodes 150 --steps 200 --seed 0 --out "$work/transitions.npz"
python3 -m nvmw tune "$work/transitions.npz" --quick --n-jobs 2 --seed 0 --out "$out/qlearning-optane-1dimm.tuned.json"
python3 -m nvmw train "${common[@]}" --transitions "$work/transitions.npz" \
  --tuned "$out/qlearning-optane-1dimm.tuned.json" --episodes "${NVMW_TRAIN_EPISODES:-20}" --fqi-iterations 10 --seed 0 \
  --out "$out/qlearning-optane-1dimm.joblib" --curve "$work/learning-curve.png"
