"""`nvmw serve` with group commit on (the default) and off, each against Redis.

Runs `bench/serve_vs_redis.py --only a` (redis-benchmark, 128 B SET and GET, 50 clients)
`--runs` times for each configuration, alternating on, off, on, off..., so that the two
see the same machine. Each run compares nvmw with a redis-server started beside it, so
the figures to compare are the per-run ratios nvmw / Redis (ops/s, p99, server CPU per
request): Redis is the yardstick both configurations are measured against. Writes one
JSON with every run's ratios and, per configuration, the median over runs of each run's
median ratio.

    python bench/serve_group_commit.py --runs 2 --rounds 5 --out bench/results-serve-group-commit.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {"on": [], "off": ["--serve-arg=--no-group-commit"]}


def one_run(extra: list, rounds: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, os.path.join(HERE, "serve_vs_redis.py"), "--only", "a",
               "--rounds", str(rounds), "--out", out.name, *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs per configuration (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (default %(default)s)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    if args.runs < 1 or args.rounds < 1:
        ap.error("--runs and --rounds must be at least 1")
    runs = {name: [] for name in CONFIGS}
    for i in range(args.runs):
        for name, extra in CONFIGS.items():
            print(f"run {i + 1}/{args.runs}, group commit {name}", file=sys.stderr, flush=True)
            res = one_run(extra, args.rounds)
            runs[name].append({"ratios": {k: v["median"] for k, v in res["ratios"].items()},
                               "spread": {k: [v["min"], v["max"]] for k, v in res["ratios"].items()},
                               "round_loads": res["round_loads"],
                               "summary": res["summary"]})
    report = {
        "config": {"runs": args.runs, "rounds": args.rounds, "order": "on, off alternating",
                   "configs": {k: v or ["(defaults)"] for k, v in CONFIGS.items()}},
        "median_of_runs": {name: {k: statistics.median(r["ratios"][k] for r in rs)
                                  for k in rs[0]["ratios"]} for name, rs in runs.items()},
        "runs": runs,
        "versions": one_version(),
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def one_version() -> dict:
    try:
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = ""
    return {"nvmw_commit": commit}


if __name__ == "__main__":
    sys.exit(main())
