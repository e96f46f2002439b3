"""`nvmw tune`: per-action model selection for the Q models (thesis Appendix D): 5-fold
cross-validation over Table D.1's grid on collected transitions, in parallel with joblib,
or on a Ray cluster (--backend ray)."""
from __future__ import annotations

import argparse
import json

from nvmw import jsonfiles
from nvmw.commands import SUMMARIES
from nvmw.commands._args import check_apart, check_output_file, int_in, make_parent, nonneg_int
from nvmw.commands._util import report_stream
from nvmw.rl.agent import REWARD_TRANSFORMS
from nvmw.rl.pretrain import GRIDS, load_transitions, tune_models


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help=SUMMARIES["tune"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("transitions", help="file written by `nvmw collect`")
    p.add_argument("--out", required=True, help="JSON with the chosen parameters per action")
    p.add_argument("--grid", choices=sorted(GRIDS), default="full",
                   help="full: Table D.1's 1,296 points (default); thesis: the 72 of them around Table D.2's "
                        "choices (squared loss, invscaling, max_iter <= 1,000); quick: 16 points")
    p.add_argument("--quick", dest="grid", action="store_const", const="quick", help="the same as --grid quick")
    p.add_argument("--cv", type=int_in(2, 1000), default=5, help="folds (default %(default)s)")
    p.add_argument("--n-jobs", type=int_in(1, 1024), default=2, help="parallel fits (default %(default)s)")
    p.add_argument("--backend", choices=["loky", "ray"], default="loky",
                   help="joblib backend: local processes, or Ray (local instance or --ray-address)")
    p.add_argument("--ray-address", default=None, help="connect to this Ray cluster instead of starting one")
    p.add_argument("--max-samples", type=int_in(10), default=None,
                   help="at most this many transitions per action (a seeded subset; default: all)")
    p.add_argument("--reward-transform", choices=REWARD_TRANSFORMS, default="symlog",
                   help="the target the models are tuned on, as the agent will learn it (default %(default)s; "
                        "none: the raw reward, as the thesis)")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the train/test split, the folds, the --max-samples subset and the models (default %(default)s)")
    p.set_defaults(func=run)


def run(args) -> int:
    check_output_file(args.out, "--out")
    check_apart([("--out", args.out)], [("TRANSITIONS", args.transitions)])
    data = load_transitions(args.transitions)
    res = tune_models(data, grid=GRIDS[args.grid], cv=args.cv, n_jobs=args.n_jobs,
                      backend=args.backend, ray_address=args.ray_address, seed=args.seed, progress=True,
                      max_samples=args.max_samples, reward_transform=args.reward_transform)
    res["transitions"] = args.transitions
    res["reward_transform"] = args.reward_transform
    make_parent(args.out)
    with jsonfiles.open_output(args.out, encoding="utf-8") as fh:
        json.dump(res, fh, indent=2)
    print(json.dumps({"out": args.out, "backend": res["backend"], "wall_s": round(res["wall_s"], 1),
                      "test_r2": [round(x, 3) for x in res["test_r2"]], "model_params": res["model_params"]},
                     indent=2), file=report_stream(args.out))
    return 0
