"""Generator capacity: the most ops/s one YCSB-style generator issues on this machine
against a no-op engine, directly and through the middleware (no-control, and queues +
pools), for several client counts. Prints JSON. A sweep figure near these ceilings is a
client limit, not a middleware limit.

    python bench/generator_capacity.py [--duration 2] [--threads 1,16,100]
"""
from __future__ import annotations

import argparse
import json

from nvmw.workloads.ycsb import YcsbConfig, measure_capacity


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=2.0)
    p.add_argument("--threads", default="1,16,100", help="client counts, comma-separated")
    p.add_argument("--value-size", type=int, default=128)
    p.add_argument("--middleware-threads", type=int, default=2)
    args = p.parse_args()
    runs = []
    for t in (int(v) for v in args.threads.split(",")):
        cfg = YcsbConfig(record_count=10_000, operation_count=0, duration_s=args.duration,
                         threads=t, value_bytes=args.value_size)
        runs.append(measure_capacity(cfg, middleware_threads=args.middleware_threads))
    print(json.dumps({"runs": runs}, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
