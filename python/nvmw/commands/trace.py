"""`nvmw trace synth|stats`: write synthetic traces (Azure-like, Wukong-SVD-like) and
summarise trace files (Azure Functions Blob 2020 CSV or native CSV)."""
from __future__ import annotations

import argparse
import sys

from nvmw.commands import SUMMARIES
from nvmw.commands._args import TRACE_FORMAT_HELP, fraction, int_in, nonneg_int, positive_float
from nvmw.commands._util import plural, print_json
from nvmw.devices import core_file_name
from nvmw.workloads.traces import SVD_TASKS_MAX, SYNTH_ROWS_MAX, read_trace, sniff_format, synth, trace_stats


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help=SUMMARIES["trace"],
                       description="Synthetic traces and trace statistics (docs/workloads-trace.md).")
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    tsub.required = True

    s = tsub.add_parser("synth", help="write a synthetic trace",
                        description="azure: Azure-Functions-like accesses in the released 11-column "
                        "schema (defaults follow the published statistics); svd: Wukong tall-skinny "
                        "SVD task-graph I/O in the native format.")
    s.add_argument("kind", choices=["azure", "svd"],
                   help="azure: Azure-Functions-like blob accesses; svd: Wukong SVD task-graph I/O")
    s.add_argument("-o", "--output", required=True, help="file to write")
    s.add_argument("--rows", type=int_in(1, SYNTH_ROWS_MAX), default=10_000,
                   help=f"records, at most {SYNTH_ROWS_MAX:,}: the trace is built whole in memory, about 150 B a "
                        "record (default %(default)s)")
    s.add_argument("--seed", type=nonneg_int, default=1,
                   help="seed of the synthesis (same seed, same trace) (default %(default)s)")
    s.add_argument("--format", choices=["azure", "native"], default=None,
                   help="output format (default: azure for azure, native for svd)")
    s.add_argument("--sorted", action="store_true",
                   help="azure format: write rows in time order (the released file is unsorted)")
    a = s.add_argument_group("azure options")
    a.add_argument("--rate", type=positive_float, default=None, help="accesses/s (default 36.6, the dataset mean)")
    a.add_argument("--write-fraction", type=fraction, default=None, help="fraction of writes (default 0.2)")
    a.add_argument("--new-blob-fraction", type=fraction, default=None,
                   help="probability an access touches a new blob (default 0.5)")
    a.add_argument("--max-blob-bytes", type=int_in(0, 1 << 40), default=None,
                   help="clip blob sizes (default 64 MiB; 0 = no clip)")
    v = s.add_argument_group("svd options")
    v.add_argument("--tasks", type=int_in(1, SVD_TASKS_MAX), default=None,
                   help=f"parallel tasks B, at most {SVD_TASKS_MAX:,} (default 20)")
    v.add_argument("--task-ms", type=positive_float, default=None, help="mean task compute time (default 50)")
    s.set_defaults(func=run_synth)

    t = tsub.add_parser("stats", help="summarise a trace file",
                        description="Rows, reads, writes, skipped (malformed) rows, size p50/p99 "
                        "(per access, nearest rank) and duration of a trace.")
    t.add_argument("file", help="trace file (Azure Functions Blob CSV or native CSV)")
    t.add_argument("--format", choices=["azure", "native"], default=None, help=TRACE_FORMAT_HELP)
    t.add_argument("--strict", action="store_true",
                   help="fail on the first malformed row (default: skip and count them)")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    t.set_defaults(func=run_stats)


def run_synth(args: argparse.Namespace) -> int:
    opts = {}
    if args.kind == "azure":
        for key, val in (("accesses_per_s", args.rate), ("write_fraction", args.write_fraction),
                         ("new_blob_fraction", args.new_blob_fraction),
                         ("max_blob_bytes", args.max_blob_bytes)):
            if val is not None:
                opts[key] = val
    else:
        for key, val in (("tasks", args.tasks), ("task_ms", args.task_ms)):
            if val is not None:
                opts[key] = val
    fmt = args.format or ("azure" if args.kind == "azure" else "native")
    output = core_file_name(args.output)  # refused before the synthesis
    trace = synth(args.kind, rows=args.rows, seed=args.seed, **opts)
    trace.write(output, fmt, seed=args.seed, shuffle=(fmt == "azure" and not args.sorted))
    print(f"wrote {plural(len(trace), args.kind + ' record')} ({fmt} format) to {args.output}", file=sys.stderr)
    return 0


def run_stats(args: argparse.Namespace) -> int:
    trace = read_trace(args.file, args.format or sniff_format(args.file), skip_malformed=not args.strict)
    stats = trace_stats(trace)
    if trace.skipped_rows:
        stats["first_skip_reason"] = trace.first_skip_reason
    if args.json:
        print_json(stats)
    else:
        for key, val in stats.items():
            print(f"{key:<20}{val}")
    return 0
