#!/usr/bin/env bash
# The long-run evaluation on the real middleware (docs/rl.md): every controller of the
# default line-up (none, fixed:15,15, oracle, aimd, gradient, q-learning) interleaved per
# phase segment over the default phase set, emulated optane-1dimm, 0.1 s windows, one run
# per seed, back to back.
#   scripts/evaluate-real.sh [--steps N] [--switch-every K] [--agent FILE] [--controllers "A B ..."]
#                            [--tag T] SEED...
#   (default: 1200 steps, 200 per segment, seeds 0 1 2, the shipped agent, the default
#   line-up; with --tag the outputs are named seed<S>-<T>; --controllers "... q-learning
#   q-learning:OLD.joblib" runs two agents side by side)
# Per seed it writes build/eval-real/seed<S>/ (nvmw evaluate's eval.json, eval.md, eval.png,
# traces.json, run.json), then bench/results-rl-eval-seed<S>.json (run header with the
# command and the load average before and after, the summary per controller, and per
# controller and phase: both/latency/throughput SLA fractions, median reward, p99 and
# threads) and docs/rl-eval-seed<S>.png.
# Needs the package installed (scripts/setup.sh) or NVMW_DEV_CORE_DIR/PYTHONPATH set.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=1200 switch=200 seeds=() agent=() controllers=() tag=""
while (( $# )); do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --switch-every) switch=$2; shift 2 ;;
    --agent) agent=(--agent "$2"); shift 2 ;;
    # shellcheck disable=SC2206
    --controllers) controllers=(--controllers $2); shift 2 ;;
    --tag) tag=-$2; shift 2 ;;
    *) seeds+=("$1"); shift ;;
  esac
done
(( ${#seeds[@]} )) || seeds=(0 1 2)
for s in "${seeds[@]}"; do
  out=build/eval-real/seed$s$tag
  mkdir -p build/eval-real
  cmd=(nvmw evaluate --env real --window 0.1 --steps "$steps" --switch-every "$switch" --seed "$s" "${agent[@]}" "${controllers[@]}" --out "$out")
  before=$(cut -d' ' -f1-3 /proc/loadavg) start=$(date -u '+%Y-%m-%d %H:%M')
  echo "== $(date -u +%H:%M:%S) seed $s (load $before): ${cmd[*]}" >&2
  python3 -m "${cmd[@]}" > "$out.log" 2>&1 || { echo "seed $s failed, see $out.log" >&2; exit 1; }
  after=$(cut -d' ' -f1-3 /proc/loadavg) end=$(date -u '+%H:%M')
  python3 - "$out" "bench/results-rl-eval-seed$s$tag.json" "${cmd[*]}" "$start-$end UTC" "$before" "$after" <<'EOF'
import json, sys
import numpy as np
out, dest, cmd, when, before, after = sys.argv[1:]
summary = json.load(open(f"{out}/eval.json"))
run = json.load(open(f"{out}/run.json"))
traces = json.load(open(f"{out}/traces.json"))
run.update(command=cmd, measured=when, load_average_before=[float(x) for x in before.split()],
           load_average_after=[float(x) for x in after.split()])
per_phase = {}
for name, tr in traces.items():
    run.setdefault("schedule", tr["schedule"])
    ph = np.asarray(tr["phase"])
    lat, tp = np.asarray(tr["sla_latency_met"], bool), np.asarray(tr["sla_throughput_met"], bool)
    rows = {}
    for p in sorted(set(ph.tolist())):
        m = ph == p
        threads = None
        if name != "no-control":
            threads = [float(np.median(np.asarray(tr["interactive_threads"])[m])),
                       float(np.median(np.asarray(tr["batch_threads"])[m]))]
        rows[str(p)] = {"steps": int(m.sum()), "sla_both_met": round(float((lat & tp)[m].mean()), 3),
                        "sla_latency_met": round(float(lat[m].mean()), 3),
                        "sla_throughput_met": round(float(tp[m].mean()), 3),
                        "reward_median": round(float(np.median(np.asarray(tr["reward"])[m])), 2),
                        "p99_us_median": round(float(np.median(np.asarray(tr["p99_us"])[m])), 1),
                        "throughput_median": round(float(np.median(np.asarray(tr["throughput"])[m])), 0),
                        "threads_median": threads}
    per_phase[name] = rows
with open(dest, "w") as fh:
    json.dump({"run": run, "summary": summary, "per_phase": per_phase}, fh, indent=1)
    fh.write("\n")
for name, s in summary.items():
    print(f"seed {run['seed']} {name:14} both {s['sla_both_met']:.3f} latency {s['sla_latency_met']:.3f} "
          f"throughput {s['sla_throughput_met']:.3f} median reward {s['reward']['median']:10.1f} "
          f"settle {s['settle_steps_median']} ({s['segments_settled']})")
EOF
  cp "$out/eval.png" "docs/rl-eval-seed$s$tag.png"
  echo "== $(date -u +%H:%M:%S) seed $s done (load $after): bench/results-rl-eval-seed$s$tag.json docs/rl-eval-seed$s$tag.png" >&2
done
