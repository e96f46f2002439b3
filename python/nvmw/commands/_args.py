"""Arguments several commands share, spelled once: the store (--engine, --path,
--device, --window), the RL environment (--env, --sim-params, --sla, --steps, --seed on
top of the store), controller names, and the temporary pmem pool. Old spellings still
work and print a deprecation note on stderr."""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import sys
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from nvmw.commands._util import ensure_pmem_force
from nvmw.control.controllers import NoControl
from nvmw.devices import list_profiles, load_profile
from nvmw.errors import NvmwError
from nvmw.lab.lineup import CONTROLLER_FACTORIES, CONTROLLER_NAMES, DEPRECATED_NAMES, ControllerContext, canonical_name
from nvmw.lab.lineup import deprecated, make_controller
from nvmw.middleware import DEFAULT_MAX_THREADS
from nvmw.rl.simrun import RUN_WINDOWS_MAX
from nvmw.scratch import scratch_dir
from nvmw.workloads.phases import list_phases

if TYPE_CHECKING:
    from nvmw.rl.envs import ControlEnv
    from nvmw.rl.episodes import EpisodeRunner

# The RL environments and episode runners (Gymnasium, scikit-learn: a second or more to
# import) are imported by the functions that need them, so that the store and service
# commands (serve, run-phase, ycsb, ...) start without them.

ENGINES = ("memory", "pmem")


def steps_help(what: str, default: str, *, memory: str = "while its episode runs") -> str:
    """The help of an RL command's --steps (or --switch-every): its bound
    (`nvmw.rl.simrun.check_steps`) and what a step costs."""
    return (f"{what}, at most {RUN_WINDOWS_MAX:,}: a step is one --window on the middleware (at the "
            "bound 28 h of 0.1 s windows, 11.6 days of 1 s ones) or 0.1-0.3 ms of the simulator, and takes "
            f"about 0.5 KB of memory {memory} (default {default})")


class _DeprecatedAlias(argparse.Action):
    """An old option name: stores into the new option's destination, with a note."""

    def __init__(self, option_strings, dest, new_name: str = "", **kwargs):
        self.new_name = new_name
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        deprecated(option_string, self.new_name)
        setattr(namespace, self.dest, values)


def add_store_args(p: argparse.ArgumentParser, *, device_default: str = "none", engine_default: str = "memory",
                   window_default: float = 1.0) -> None:
    """--engine, --path, --device, --window: the store a command opens and its window.

    Store commands (ycsb, replay, run-phase) run on the raw engine by default; the RL
    commands default to the emulated device their shipped SLA, agent and simulator fit
    were made for (see add_env_args)."""
    p.add_argument("--engine", choices=ENGINES, default=engine_default,
                   help="engine under the middleware (default %(default)s)")
    p.add_argument("--path", default=None,
                   help="pmem pool file (default: a temporary pool in /dev/shm, removed afterwards)")
    p.add_argument("--pool", dest="path", action=_DeprecatedAlias, new_name="--path", help=argparse.SUPPRESS)
    p.add_argument("--device", type=device_profile, default=device_default,
                   help="emulated device profile: none | optane-1dimm | optane-6dimm, or a profile file "
                        "(default %(default)s)")
    p.add_argument("--window", type=window_seconds, default=window_default,
                   help="monitor window, s (default %(default)s)")


def add_env_args(p: argparse.ArgumentParser, *, window_default: float = 0.1, steps: bool = True) -> None:
    """The environment options shared by collect/train/evaluate/calibrate."""
    from nvmw.rl.registry import ENV_KINDS
    p.add_argument("--env", choices=ENV_KINDS, default="real",
                   help="environment: the real middleware (default), the analytic synthetic stand-in, "
                        "or the fitted simulator")
    p.add_argument("--sim-params", default=None, help="--env sim: fitted simulator parameters (JSON path "
                   "or shipped name; default: the shipped fit for --device)")
    add_store_args(p, device_default="optane-1dimm", window_default=window_default)
    p.add_argument("--sla", default=None, help="SLA spec: a TOML path or a shipped name (thesis, "
                   "calibrated-optane-1dimm); default: the calibrated spec for --device")
    if steps:
        p.add_argument("--steps", type=int_in(1, RUN_WINDOWS_MAX), default=200,
                       help=steps_help("steps per episode", "%(default)s"))
    p.add_argument("--seed", type=int_in(0, (1 << 64) - 1), default=0,
                   help="seed of the environment's workloads and of the run, 0 to 2^64-1 (same seed, same "
                        "episodes) (default %(default)s)")


def env_kwargs_from_args(args, *, control: bool = True, phase: int = 1) -> dict:
    """The environment as `make_env` keyword arguments (what episode workers rebuild it from)."""
    return dict(kind=args.env, phase=phase, window_s=args.window, sla=args.sla, device=args.device,
                engine=args.engine, control=control, path=args.path,
                max_episode_steps=getattr(args, "steps", 200), sim_params=getattr(args, "sim_params", None))


def env_from_args(args, *, control: bool = True, phase: int = 1) -> ControlEnv:
    from nvmw.rl.registry import make_env
    return make_env(**env_kwargs_from_args(args, control=control, phase=phase))


def episodes_help(what: str, default: str, *, kept: bool = False) -> str:
    """The help of an RL command's episode count (`nvmw.rl.episodes.EPISODES_MAX`) and what
    an episode costs (with `kept`: its transitions are all kept)."""
    from nvmw.rl.episodes import EPISODES_MAX
    memory = ("; every transition is kept until the end, about 1 KB per step (episodes x phases x steps)"
              if kept else "")
    return (f"{what}, at most {EPISODES_MAX:,}: an episode is --steps windows (at the default 200 steps, 20 s of "
            f"0.1 s windows on the middleware, about 0.04 s of the simulator){memory} (default {default})")


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """--backend, --workers, --ray-address: where episodes run (collect, train)."""
    from nvmw.rl.episodes import BACKENDS, WORKERS_MAX
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where episodes run: local (this process, or --workers processes) or ray (Ray tasks; "
                        "a local Ray instance unless --ray-address). Same seed, same result (default %(default)s)")
    p.add_argument("--workers", type=int_in(1, WORKERS_MAX), default=None,
                   help=f"episodes at a time: local worker processes, or Ray CPUs of a local instance, at most "
                        f"{WORKERS_MAX}: each local worker is a process with its own environment (about 130 MB "
                        "with the simulator) (default: 1 for local, 2 for ray; --env sim or synthetic only for more "
                        "than one)")
    p.add_argument("--ray-address", default=None,
                   help="--backend ray: the cluster to join (ray.init(address=...)); default: start a local instance")


def runner_from_args(args, env: ControlEnv) -> EpisodeRunner:
    """The episode runner of --backend/--workers/--ray-address for `env` (built from args)."""
    from nvmw.rl.episodes import EpisodeRunner
    workers = args.workers or (2 if args.backend == "ray" else 1)
    if args.ray_address and args.backend != "ray":
        raise ValueError("--ray-address needs --backend ray")
    return EpisodeRunner(args.backend, workers=workers, env=env, env_kwargs=env_kwargs_from_args(args),
                         ray_address=args.ray_address)


#: --format of the commands that read a trace file (`nvmw.workloads.traces.sniff_format`).
TRACE_FORMAT_HELP = ("trace file format (default: from the file's header: native when it is "
                     "time_ms,op,key,bytes, else azure)")


def controller_spelling(leave_out: tuple = ()) -> Callable[[str], str]:
    """The argparse type of a --controller (or one entry of --controllers) whose run
    opens a middleware with the default thread limit: an unknown name (those in
    `leave_out` are not listed as choices) or fixed:I,B with a count outside
    [1, DEFAULT_MAX_THREADS] is a usage error naming the option, before anything starts
    (the run refused it only once it had started, in words that named no option).
    Whatever else a controller needs (an SLA, an agent file) is checked by the run."""
    def parse(text: str) -> str:
        kind, _, arg = text.partition(":")
        kind = DEPRECATED_NAMES.get(kind, kind)
        if kind not in CONTROLLER_FACTORIES:
            names = ", ".join(n for n in CONTROLLER_NAMES if n.partition(":")[0] not in leave_out)
            raise argparse.ArgumentTypeError(f"unknown controller {text!r}: use one of {names}")
        if kind == "fixed" and arg:
            m = re.fullmatch(r"(-?[0-9]+),(-?[0-9]+)", arg)
            if m is None:
                raise argparse.ArgumentTypeError(f"fixed controller wants 'fixed:I,B' (e.g. fixed:10,10), "
                                                 f"got {text!r}")
            if not all(1 <= int(x) <= DEFAULT_MAX_THREADS for x in m.groups()):
                raise argparse.ArgumentTypeError(f"{text}: thread counts must be in [1, {DEFAULT_MAX_THREADS}]")
        return text
    return parse


def controller_help(default: str, *, leave_out: tuple = ()) -> str:
    return f"{' | '.join(n for n in CONTROLLER_NAMES if n not in leave_out)} (default {default})"


@contextlib.contextmanager
def pool_path(engine: str, path: Optional[str], argv: list, prefix: str) -> Iterator[Optional[str]]:
    """The pmem pool path to use: `path`, or a temporary pool on /dev/shm removed afterwards
    (`nvmw.scratch`: also when the run is killed, by the next run that makes one)."""
    if engine != "pmem" or path is not None:
        yield path
        return
    ensure_pmem_force(argv)  # the temporary pool lives on tmpfs
    removed: list = []
    with scratch_dir(prefix, "/dev/shm", removed=removed) as pool_dir:
        for d in removed:
            print(f"nvmw: removed {d}, the temporary pool of a run that was killed", file=sys.stderr)
        yield os.path.join(pool_dir, "nvmw.pool")


def argv_of(args) -> list:
    """The command's own words (for commands that re-exec themselves)."""
    return getattr(args, "argv", sys.argv[1:])


def add_pool_args(p: argparse.ArgumentParser, default: tuple, *, any_controller: bool = False) -> None:
    """--controller for commands that run one configuration: none | fixed:I,B (every
    controller name with `any_controller`), with the old --no-control /
    --interactive-threads / --batch-threads still accepted."""
    names = " | ".join(CONTROLLER_NAMES) if any_controller else "none (no-control baseline) | fixed:I,B"
    p.add_argument("--controller", default=None, help=f"{names} (default fixed:{default[0]},{default[1]})")
    p.add_argument("--no-control", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--interactive-threads", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch-threads", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(pool_default=tuple(default))


def pool_config(args) -> tuple[bool, int, int]:
    """(control, interactive, batch) from add_pool_args' options; ValueError for a
    controller that is not a static configuration."""
    i, b = args.pool_default
    if args.controller is None and (args.no_control or args.interactive_threads is not None
                                    or args.batch_threads is not None):
        i = args.interactive_threads if args.interactive_threads is not None else i
        b = args.batch_threads if args.batch_threads is not None else b
        if args.no_control:
            deprecated("--no-control", "--controller none")
            return False, i, b
        deprecated("--interactive-threads/--batch-threads", f"--controller fixed:{i},{b}")
        return True, i, b
    name = canonical_name(args.controller or f"fixed:{i},{b}")
    if name.partition(":")[0] not in ("none", "fixed"):
        raise ValueError(f"this command runs one static configuration: --controller none or fixed:I,B, "
                         f"not {args.controller!r}")
    ctl = make_controller(name, ControllerContext(fixed=(i, b)))
    if isinstance(ctl, NoControl):
        return False, i, b
    return True, ctl.interactive, ctl.batch


# --- numbers and output paths checked at parse time ------------------------------------

_INT64_MAX = (1 << 63) - 1

#: How numbers are written on the command line, as the core's parsers (std::from_chars)
#: and the docs take them: ASCII decimal digits with an optional leading '-' (the range
#: then says whether a negative value makes sense); a number may have a fraction and an
#: exponent, or be inf or nan (refused by the range). Python's int() and float() also
#: take "1_000", "+5", " 5 " and other scripts' digits ("٥"), which the rest of the
#: project refuses.
_INT_TEXT = re.compile(r"-?[0-9]+")
_FLOAT_TEXT = re.compile(r"-?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|infinity|nan)",
                         re.IGNORECASE)


def _number(kind, text: str, lo, hi, what: str):
    if not (_INT_TEXT if kind is int else _FLOAT_TEXT).fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer (decimal digits, optionally after '-')" if kind is int else
            f"{text!r} is not a number (decimal digits with an optional point and exponent, optionally after '-')")
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}")
    if kind is float and value != value:  # NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be {what}")
    return value


def int_in(lo: int = 1, hi: int = _INT64_MAX):
    """argparse type: an integer in [lo, hi] (default: positive). Refuses out-of-range
    values at parse time with the range in the message, before any binding sees them."""
    what = f"between {lo} and {hi}"
    if hi == _INT64_MAX:  # the usual case: only the lower end is worth stating ...
        what = f">= {lo}"

    def parse(text: str) -> int:
        value = _number(int, text, None, None, "")
        if value > hi and hi == _INT64_MAX:  # ... unless the value is past the upper one
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be between {lo} and 2^63-1")
        if value < lo or value > hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be {what}")
        return value
    parse.__name__ = "integer"
    return parse


def float_in(lo: float = 0.0, hi: float = float("inf"), *, strict: bool = True):
    """argparse type: a finite number > lo (>= lo with strict=False), <= hi."""
    def parse(text: str) -> float:
        value = _number(float, text, None, None, "")
        if value in (float("inf"), float("-inf")) or (value <= lo if strict else value < lo) or value > hi:
            bound = f"> {lo:g}" if strict else f">= {lo:g}"
            what = bound if hi == float("inf") else f"{bound} and <= {hi:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be {what}")
        return value
    parse.__name__ = "number"
    return parse


positive_int = int_in(1)
nonneg_int = int_in(0)
positive_float = float_in(0.0)
nonneg_float = float_in(0.0, strict=False)
fraction = float_in(0.0, 1.0, strict=False)
#: A monitor window, s: from the middleware's shortest (1 ms; the simulator is held to it
#: too) to an hour.
window_seconds = float_in(0.001, 3600.0, strict=False)


def open_fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1."""
    value = _number(float, text, None, None, "")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be > 0 and < 1")
    return value


open_fraction.__name__ = "number"


def phase_number(text: str) -> int:
    """argparse type: the number of a shipped phase."""
    value = _number(int, text, None, None, "")
    shipped = list_phases()
    if value not in shipped:
        raise argparse.ArgumentTypeError(f"{text} is not a phase: one of {', '.join(map(str, shipped))}")
    return value


phase_number.__name__ = "phase"


def device_profile(text: str) -> str:
    """argparse type of a --device the run hands on as it is: a shipped profile name or a
    profile file, loaded now so that an unknown name is a usage error listing the shipped
    names, not an error once the run has begun opening its store."""
    try:
        load_profile(text)
    except NvmwError as e:
        message = e.args[0] if e.args else str(e)
        if "known:" not in message:
            message += f" (shipped profiles: {', '.join(list_profiles())})"
        raise argparse.ArgumentTypeError(message) from None
    return text


device_profile.__name__ = "device profile"


class Distinct(argparse.Action):
    """A list option (nargs) whose values must differ: one given twice would be measured,
    counted or trained on twice under one entry."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = set()
        for v in values:
            if v in seen:
                parser.error(f"argument {option_string or self.metavar or self.dest}: {v} is given more than once")
            seen.add(v)
        setattr(namespace, self.dest, values)


def check_output_file(path: Optional[str], option: str, *, create: bool = False) -> None:
    """Refuse, before a long run, an output file whose directory is missing and cannot be
    created or is not writable (the results would otherwise be lost at the end). The
    directory is only checked (`check_output_dir`), so a run refused after this leaves
    nothing behind: `make_parent` makes it when the file is written. With `create` True
    it is made now."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path)) or "."
    check_output_dir(parent, option, create=create)
    if os.path.isdir(path):
        raise ValueError(f"{option} {path}: is a directory")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{option} {path}: not writable")


#: What one transition costs `nvmw collect` while it is kept (its fields as Python objects
#: until the run ends): 0.7 KB measured on a 200,000-step run, rounded up.
TRANSITION_BYTES = 1024


def check_kept_transitions(episodes: int, phases: int, steps: int) -> None:
    """Refuse, before a collection, one whose transitions (all kept until the end) could
    not fit in this machine's memory: each option is bounded alone, but 10,000 episodes x
    6 phases x 1,000,000 steps would need tens of terabytes and end, hours later, in an
    out-of-memory kill with nothing saved."""
    total = episodes * phases * steps
    need = total * TRANSITION_BYTES
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not known here: nothing to compare with
        return
    if need > memory:
        raise ValueError(f"--episodes {episodes:,} x {phases} phase{'s' if phases != 1 else ''} x --steps "
                         f"{steps:,} = {total:,} transitions, about {need / 2**30:,.1f} GiB kept in memory "
                         f"until the end, more than this machine's {memory / 2**30:,.1f} GiB: collect fewer, "
                         f"or in several runs with different --seed values")


def make_parent(path: Optional[str]) -> None:
    """Make the directory of an output file about to be written (`check_output_file`
    checked that it can be made)."""
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def check_beside(path: Optional[str], option: str, beside: str, instead: str = "") -> None:
    """Refuse, before a run, an output that is there and is not a regular file (a device
    such as /dev/null, a FIFO) when the command also writes a file beside it under a name
    made from it (`beside`, e.g. "the oracle table NAME.oracle.json"): /dev/null would put
    /dev/null.oracle.json in /dev. `instead` names the option that places that file
    elsewhere, if there is one. A missing path, or a link to a regular file, is fine."""
    if path is None:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there yet (check_output_file reports what cannot be made)
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # check_output_file refuses a directory
        where = f": name it with {instead}" if instead else ""
        raise ValueError(f"{option} {path}: not a regular file, so {beside} has no place beside it{where}")


def check_apart(outputs: list, inputs: list = ()) -> None:
    """Refuse, before a run, two output options naming one file (the second write replaced
    the first) and an output naming an input file of the run (the run replaced what it
    read: a sweep, transitions). `outputs` and `inputs` are (option, path) pairs; a path
    of None is left out, and so is an input that is not a file (a shipped name)."""
    seen: dict = {}
    for option, path in inputs:
        if path is not None and os.path.isfile(path):
            seen.setdefault(os.path.realpath(path), option)
    for option, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise ValueError(f"{option} {path} is also {seen[key]}: one file cannot be both")
        seen[key] = option


def check_output_dir(path: Optional[str], option: str, *, create: bool = True) -> None:
    """Create the output directory now (as the run would at its end) and check it is writable.
    With `create` False nothing is made: a missing directory is only checked to be one the
    run can make (the nearest directory above it is writable), for a command that refuses
    more of its arguments later and should leave nothing behind when it does."""
    if path is None:
        return
    if not create and not os.path.lexists(path):
        above = os.path.dirname(os.path.abspath(path))
        while not os.path.lexists(above):
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            raise ValueError(f"{option} {path}: cannot create the output directory ({above} is not a directory)")
        if not os.access(above, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {path}: cannot create the output directory ({above} is not writable)")
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{option} {path}: cannot create the output directory ({e.strerror})") from None
    if not os.path.isdir(path):
        raise ValueError(f"{option} {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: output directory is not writable")
