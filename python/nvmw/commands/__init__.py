"""Subcommands of the `nvmw` CLI: one module each, commands/NAME.py registering the command
NAME (run_phase.py registers run-phase). nvmw.cli imports only the module of the command
a command line names; `nvmw --help` and unknown words are answered from SUMMARIES, each
command's one-line summary, without importing any of them."""

#: Each command's one-line summary (its help in `nvmw --help`); its module registers it with this.
SUMMARIES = {
    "bench": "microbenchmarks (JSON output)",
    "calibrate": "derive SLA goals and the oracle table from a sweep",
    "check": "check a pmem pool file for damage; salvage intact entries",
    "collect": "random-agent transitions for pretraining (.npz)",
    "demo": "end-to-end demo: interference table, sweep, controllers",
    "device": "emulated device profiles: list, show, curve, bench, plot",
    "evaluate": "long-run comparison of controllers (JSON, Markdown, PNG)",
    "replay": "replay a trace open-loop through the middleware",
    "run-phase": "run an RL phase (interactive + batch trace replays) under a controller",
    "serve": "serve the store over the Redis protocol (RESP), with a controller and metrics",
    "sim": "the simulator: fit to a real sweep, check, run",
    "sweep": "concurrency sweep: no control vs a grid of I/B pool sizes (CSV, JSON, PNG)",
    "trace": "synthesise or summarise storage-access traces",
    "train": "pretrain + Q-learning per phase; saves the agent",
    "tune": "cross-validated hyperparameter search for the nine Q models",
    "ycsb": "YCSB-style closed-loop workload (client-side p50/p99/throughput)",
}
