"""Runs each failure family of docs/reliability.md against the current tree and prints
what happens now, as JSON: {family: {"happens": "...", "ok": true|false}}. Each case
runs in its own child interpreter (a crash, hang or abort is then an outcome, not the
end of the run) with a time limit; "ok" means a clear message or the documented
behaviour, never a crash, a hang, a traceback or a wrong answer.

    python3 bench/safety_cases.py [--json OUT] [--only FAMILY ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

os.environ.setdefault("PMEM_IS_PMEM_FORCE", "1")

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def run_py(code: str, *, timeout: float = 60.0, argv: tuple = (), sigint_after: float | None = None,
           limit_as: int | None = None) -> dict:
    """Runs `code` in a child interpreter: exit code (negative: killed by that signal),
    stdout, stderr, seconds, and whether it hung past `timeout`."""
    def preexec():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if limit_as is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    if sigint_after is not None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and "READY" not in (p.stderr.readline() or "READY"):
            pass
        time.sleep(sigint_after)
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        hung = True
    return {"rc": p.returncode, "out": out.strip(), "err": err.strip(), "s": round(time.monotonic() - t0, 2),
            "hung": hung}


def nvmw_cli(*argv: str, timeout: float = 120.0, limit_as: int | None = None) -> dict:
    return run_py("import sys; from nvmw.cli import main; sys.exit(main(sys.argv[1:]))", argv=argv,
                  timeout=timeout, limit_as=limit_as)


def pool_case(code: str) -> str:
    """A child script: a small pool of 40 entries at `path`, then `code`."""
    return POOL_SETUP + textwrap.dedent(code)


def died(r: dict) -> str | None:
    if r["hung"]:
        return f"hang (killed after {r['s']:.0f} s)"
    if r["rc"] < 0:
        return f"killed by signal {-r['rc']} ({signal.Signals(-r['rc']).name})"
    if "Traceback" in r["err"]:
        return "traceback: " + r["err"].splitlines()[-1][:160]
    return None


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1][:200] if text.strip() else ""


def outcome(r: dict, expect: str) -> dict:
    """ok when the child printed `expect` as its last stdout line (it checked itself)."""
    bad = died(r)
    if bad:
        return {"happens": bad, "ok": False}
    line = last_line(r["out"])
    return {"happens": line or last_line(r["err"]), "ok": r["rc"] == 0 and line.startswith(expect)}


# ---- the families --------------------------------------------------------------------

POOL_SETUP = f"""
import os, tempfile, hashlib
import nvmw
from nvmw.errors import CorruptionError
d = tempfile.mkdtemp(prefix="nvmw-safety-", dir=os.environ["NVMW_SAFETY_DIR"])
path = os.path.join(d, "p.pool")
eng = nvmw.open_engine("pmem", path, pool_size=16 << 20)
for i in range(40):
    eng.put(b"key-%d" % i, b"value-%d-" % i + b"x" * 50)
del eng
def read(): return open(path, "rb").read()
def flip(off, mask=0x10):
    b = bytearray(read()); b[off] ^= mask; open(path, "wb").write(b)
"""


def close_while_driven() -> dict:
    return outcome(run_py("""
        import threading, nvmw
        from nvmw import _core
        from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload
        from nvmw.workloads import traces
        mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=1)
        w = YcsbWorkload(mw, YcsbConfig(record_count=100, duration_s=60, threads=4)); w.load(); w.start()
        r = _core.Replay(traces.synth("azure", rows=500, seed=1), traces.replay_options(threads=2, loop=True, duration_s=60))
        r.start(mw.core)
        threading.Timer(0.3, mw.close).start()
        y, rr = w.join(), r.join()
        assert "Shutdown" in y["first_error"] or "stopped" in y["first_error"], y["first_error"]
        print(f"generator and replay end at their first ShutdownError ({y['all']['ops']} and {rr['all']['ops']} ops before the close)")
    """), "generator and replay end")


def close_racing_calls() -> dict:
    return outcome(run_py("""
        import threading, nvmw
        from nvmw.errors import ShutdownError
        mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=1)
        counts = {"ok": 0, "shutdown": 0}
        lock = threading.Lock()
        def client(n):
            while True:
                try:
                    mw.put(b"k%d" % n, b"v" * 100); kind = "ok"
                except ShutdownError:
                    kind = "shutdown"
                with lock: counts[kind] += 1
                if kind == "shutdown": return
        ts = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in ts: t.start()
        import time; time.sleep(0.3); mw.close()
        for t in ts: t.join()
        assert counts["shutdown"] == 8
        print(f"each call returns a result or ShutdownError ({counts['ok']} puts ok, 8 ShutdownError)")
    """), "each call returns")


def exit_with_async_pending() -> dict:
    r = run_py("""
        import atexit, os
        done = []
        # Registered before nvmw is imported, so it runs after nvmw's own exit hook.
        atexit.register(lambda: os.write(1, b"callbacks run by the exit: %d of 2000\\n" % len(done)))
        import nvmw
        mw = nvmw.Middleware(engine="memory", interactive_threads=1, batch_threads=1, device="optane-1dimm")
        for i in range(2000):
            mw.submit("put", b"k%d" % i, b"v" * 4096, cls="batch").add_done_callback(lambda f: done.append(f.exception()))
        # no close: the interpreter exits with the requests pending
    """)
    bad = died(r)
    ok = bad is None and r["rc"] == 0 and "2000 of 2000" in r["out"]
    return {"happens": bad or f"exit {r['rc']}; " + last_line(r["out"]), "ok": ok}


def drop_with_callbacks_pending() -> dict:
    return outcome(run_py("""
        import gc, nvmw
        mw = nvmw.Middleware(engine="memory", interactive_threads=1, batch_threads=1, device="optane-1dimm")
        done = []
        futs = [mw.submit("put", b"k%d" % i, b"v" * 4096, cls="batch") for i in range(1000)]
        for f in futs: f.add_done_callback(lambda f: done.append(1))
        del mw; gc.collect()
        assert all(f.done() for f in futs)
        print(f"every accepted request completes and its callback runs ({len(done)} of 1000)")
    """), "every accepted request completes")


def damaged_pool_crash_at_open() -> dict:
    return outcome(run_py(pool_case("""
        import random
        rng = random.Random(1); refused = opened = 0
        orig = read()
        for _ in range(40):  # one byte of the first 8 KB (header, lanes) at a time
            open(path, "wb").write(orig); flip(rng.randrange(0, 8192), 1 << rng.randrange(8))
            try:
                e = nvmw.open_engine("pmem", path, create_if_missing=False); opened += 1; del e
            except (CorruptionError, OSError) as ex:
                refused += 1
        print(f"no crash: {refused} damaged headers refused with CorruptionError, {opened} harmless flips opened")
    """)), "no crash")


def damaged_pool_wrong_value() -> dict:
    return outcome(run_py(pool_case("""
        at = read().find(b"value-17-"); flip(at + 12)
        e = nvmw.open_engine("pmem", path, create_if_missing=False)
        try:
            v = e.get(b"key-17"); print("WRONG VALUE served:", v[:20])
        except CorruptionError as ex:
            assert e.get(b"key-18") is not None
            print(f"damaged entry quarantined (CorruptionError: {str(ex)[:80]}), the rest served")
    """)), "damaged entry quarantined")


def foreign_non_utf8_layout() -> dict:
    return outcome(run_py(pool_case("""
        b = bytearray(read()); b[4096:4096 + 4] = b"\\xff\\xfe\\x80\\x00"  # the layout name
        open(path, "wb").write(b)
        try:
            nvmw.open_engine("pmem", path, create_if_missing=False); print("opened a foreign pool")
        except CorruptionError as ex:
            print(f"CorruptionError, bytes shown escaped: {str(ex)[:110]}")
    """)), "CorruptionError")


def failed_open_modifies_truncated() -> dict:
    return outcome(run_py(pool_case("""
        os.truncate(path, 8 << 20)
        before = hashlib.sha256(read()).hexdigest()
        try:
            nvmw.open_engine("pmem", path, create_if_missing=False); print("opened a truncated pool")
        except (CorruptionError, OSError) as ex:
            same = hashlib.sha256(read()).hexdigest() == before
            print(("file unchanged after the refused open: " if same else "FILE MODIFIED: ") + str(ex)[:90])
    """)), "file unchanged")


def killed_during_creation() -> dict:
    return outcome(run_py(f"""
        import os, signal, time, random, tempfile, nvmw
        d = tempfile.mkdtemp(prefix="nvmw-safety-", dir=os.environ["NVMW_SAFETY_DIR"])
        rng = random.Random(2); bad = 0
        for i in range(20):
            path = os.path.join(d, "c%d.pool" % i)
            pid = os.fork()
            if pid == 0:
                nvmw.open_engine("pmem", path, pool_size=64 << 20); os._exit(0)
            time.sleep(rng.uniform(0, 0.05)); os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
            if os.path.exists(path):
                try:
                    e = nvmw.open_engine("pmem", path, create_if_missing=False); e.put(b"k", b"v"); del e
                except Exception as ex:
                    bad += 1; print("half-made pool:", ex)
        left = [f for f in os.listdir(d) if f.startswith(".")]
        print(("no half-made pool at the path in 20 kills" if not bad else f"{{bad}} BAD") + f" ({{len(left)}} temporary files left, removed by the next creation)")
    """), "no half-made pool")


def concurrent_creators() -> dict:
    return outcome(run_py(f"""
        import os, tempfile, nvmw
        d = tempfile.mkdtemp(prefix="nvmw-safety-", dir=os.environ["NVMW_SAFETY_DIR"]); path = os.path.join(d, "p.pool")
        pids = []
        for i in range(4):
            pid = os.fork()
            if pid == 0:
                try:
                    e = nvmw.open_engine("pmem", path, pool_size=32 << 20); e.put(b"k%d" % i, b"v"); del e; os._exit(0)
                except OSError:
                    os._exit(3)  # the pool is open in another process: refused, not damaged
                except Exception:
                    os._exit(1)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
        e = nvmw.open_engine("pmem", path, create_if_missing=False)
        assert 1 not in codes and all(c in (0, 3) for c in codes), codes
        print(f"one pool, every creator opened it or was told it is in use (exit codes {{codes}}, {{e.count()}} keys)")
    """), "one pool")


def new_pool_mode() -> dict:
    return outcome(run_py(f"""
        import os, stat, tempfile, nvmw
        d = tempfile.mkdtemp(prefix="nvmw-safety-", dir=os.environ["NVMW_SAFETY_DIR"]); path = os.path.join(d, "p.pool")
        os.umask(0o022); nvmw.open_engine("pmem", path, pool_size=16 << 20)
        print(f"new pool file mode {{oct(stat.S_IMODE(os.stat(path).st_mode))}} (owner only; file_mode= to change)")
    """), "new pool file mode 0o600")


def trace_row_absurd_size() -> dict:
    d = tempfile.mkdtemp(prefix="case-", dir=os.environ["NVMW_SAFETY_DIR"])
    trace = os.path.join(d, "huge.csv")
    with open(trace, "w") as f:
        f.write("time_ms,op,key,bytes\n0.000,W,a,128\n1.000,W,b,900000000000000\n")
    r = nvmw_cli("replay", trace, "--format", "native")
    bad = died(r)
    ok = bad is None and r["rc"] != 0 and "bad_alloc" not in r["err"] and "record 2" in r["err"]
    return {"happens": bad or f"exit {r['rc']}: " + last_line(r["err"]), "ok": ok}


def thread_start_failure() -> dict:
    return outcome(run_py("""
        import resource, nvmw
        from nvmw.errors import StorageIOError
        e = nvmw.open_engine("memory")
        vm = int(open("/proc/self/statm").read().split()[0]) * 4096
        resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 20), vm + (2 << 20)))
        try:
            nvmw.Middleware(engine=e, interactive_threads=4, batch_threads=4); print("started")
        except StorageIOError as ex:
            print(f"StorageIOError: {ex}")
    """), "StorageIOError")


def memory_error_in_cli() -> dict:
    r = nvmw_cli("trace", "synth", "azure", "--rows", "4000000000", "-o", os.path.join(os.environ["NVMW_SAFETY_DIR"], "x.csv"),
                 limit_as=3 << 30, timeout=300)
    bad = died(r)
    ok = bad is None and r["rc"] == 1 and "out of memory" in r["err"]
    return {"happens": bad or f"exit {r['rc']}: " + last_line(r["err"]), "ok": ok}


def sweep_unwritable_output() -> dict:
    r = nvmw_cli("sweep", "--out", "/proc/nvmw-sweep-out")
    bad = died(r)
    ok = bad is None and r["rc"] == 1 and "--out" in r["err"] and r["s"] < 30
    return {"happens": bad or f"exit {r['rc']} after {r['s']} s, before any run: " + last_line(r["err"]), "ok": ok}


def ctrl_c() -> dict:
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from nvmw import cli; cli.build_parser(); print('READY', file=sys.stderr, flush=True); "
            "sys.exit(cli.main(['ycsb', '--duration', '600', '--threads', '4', '--records', '500']))")
    r = run_py(code, sigint_after=1.5, timeout=60)
    bad = died(r)
    ok = bad is None and r["rc"] == 130
    return {"happens": bad or f"ycsb --duration 600: exit {r['rc']} {r['s']} s after SIGINT ({last_line(r['err'])})",
            "ok": ok}


def out_of_range_integers() -> dict:
    r = nvmw_cli("ycsb", "--threads", "99999999999999999999")
    bad = died(r)
    return {"happens": bad or f"exit {r['rc']}: " + last_line(r["err"]), "ok": bad is None and r["rc"] == 2}


def clamped_thread_counts() -> dict:
    return outcome(run_py("""
        import nvmw
        mw = nvmw.Middleware(engine="memory", interactive_threads=100, batch_threads=0)
        try:
            mw.set_threads(100, 0)
        except ValueError as ex:
            print(f"Middleware(100, 0).threads == {mw.threads}; set_threads(100, 0): {ex}")
    """), "Middleware(100, 0).threads == (32, 1)")


def negative_durations() -> dict:
    r = nvmw_cli("run-phase", "1", "--duration", "-5")
    bad = died(r)
    return {"happens": bad or f"exit {r['rc']}: " + last_line(r["err"]), "ok": bad is None and r["rc"] == 2}


def non_utf8_trace_row() -> dict:
    d = tempfile.mkdtemp(prefix="case-", dir=os.environ["NVMW_SAFETY_DIR"])
    trace = os.path.join(d, "t.csv")
    with open(trace, "wb") as f:
        f.write(b"time_ms,op,key,bytes\n0.000,W,a,10\n1.000,W,k\xff,20\n")
    r = nvmw_cli("trace", "stats", trace, "--format", "native", "--json")
    bad = died(r)
    try:
        reason = json.loads(r["out"]).get("first_skip_reason", "")
    except ValueError:
        reason = ""
    ok = bad is None and r["rc"] == 0 and ":3: not UTF-8" in reason
    return {"happens": bad or f"skipped and counted: {reason}", "ok": ok}


FAMILIES = {
    "close while generator/replay drives it": close_while_driven,
    "close racing concurrent calls": close_racing_calls,
    "interpreter exit with async work pending": exit_with_async_pending,
    "dropping last reference with callbacks pending": drop_with_callbacks_pending,
    "damaged pool crash at open": damaged_pool_crash_at_open,
    "damaged pool wrong value": damaged_pool_wrong_value,
    "foreign header non-UTF-8 layout": foreign_non_utf8_layout,
    "failed open of truncated pool modifies it": failed_open_modifies_truncated,
    "killed during creation": killed_during_creation,
    "concurrent creators": concurrent_creators,
    "new pool mode": new_pool_mode,
    "trace row absurd size": trace_row_absurd_size,
    "thread start failure": thread_start_failure,
    "MemoryError in CLI": memory_error_in_cli,
    "sweep unwritable output path": sweep_unwritable_output,
    "Ctrl-C": ctrl_c,
    "out-of-range integers": out_of_range_integers,
    "clamped thread counts": clamped_thread_counts,
    "negative durations": negative_durations,
    "non-UTF-8 trace row": non_utf8_trace_row,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="also write the result to this file")
    p.add_argument("--only", nargs="+", default=None, help="run only these families")
    args = p.parse_args()
    result = {}
    # Every pool and file of the cases lives under one directory, removed at the end.
    base = tempfile.mkdtemp(prefix="nvmw-safety-", dir=SHM)
    os.environ["NVMW_SAFETY_DIR"] = base
    try:
        run_all(args, result)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if all(r["ok"] for r in result.values()) else 1


def run_all(args, result: dict) -> None:
    for name, case in FAMILIES.items():
        if args.only and name not in args.only:
            continue
        try:
            result[name] = case()
        except Exception as e:  # a broken case is reported, not fatal to the others
            result[name] = {"happens": f"case failed to run: {type(e).__name__}: {e}", "ok": False}
        print(f"{'ok ' if result[name]['ok'] else 'BAD'} {name}: {result[name]['happens']}", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
