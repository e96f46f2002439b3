"""Lifetime of a middleware seen from Python: close() racing with calls from many
threads, closing under a running YCSB generator or trace replay, interpreter exit
and garbage collection with async requests pending.

The subprocess tests run a child interpreter; their timeouts only detect a hang
(a child that deadlocks never exits), they assert nothing about speed."""
import os
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nvmw
from nvmw import _core, errors
from nvmw.workloads import traces
from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

N_THREADS = 40
# Generous: a child that hangs never finishes; one that works needs a second or two
# (more under a sanitizer).
CHILD_TIMEOUT_S = 300


def _child_env():
    env = dict(os.environ)
    # The child imports the same nvmw as this process (installed, or a source tree
    # with a developer core), never a source tree without its compiled module.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(os.path.abspath(nvmw.__file__))),
                    env.get("PYTHONPATH")) if p)
    env.setdefault("PMEM_IS_PMEM_FORCE", "1")
    return env


def _run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_child_env(),
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def _caller(mw, idx, go, closed_seen, accepted, failures, ops_done):
    """One of the racing threads: a mix of every kind of call until the middleware
    answers ShutdownError, then one more of each, all of which must raise it."""
    rng = random.Random(idx)
    key = b"k%d" % idx

    def one(kind):
        if kind == 0:
            mw.get(key, cls="interactive")
        elif kind == 1:
            mw.put(key, b"v" * rng.randrange(1, 64), cls="batch" if idx % 2 else "interactive")
        elif kind == 2:
            fut = mw.submit("put" if rng.random() < 0.5 else "get", key, b"x", cls="auto")
            accepted.append(fut)
        elif kind == 3:
            mw.set_threads(rng.randint(1, 4), rng.randint(1, 4))
        elif kind == 4:
            mw.perform_action(rng.randrange(9))
        elif kind == 5:
            mw.get_stats()
            mw.get_state()
        elif kind == 6:
            mw.remove(key)
        else:
            mw.queue_length("interactive")

    go.wait()
    try:
        while True:
            try:
                one(rng.randrange(8))
                ops_done.append(1)
            except errors.ShutdownError:
                break
        closed_seen[idx] = True
        for kind in range(8):
            try:
                one(kind)
            except errors.ShutdownError:
                continue
            failures.append(f"thread {idx}: call {kind} after close did not raise ShutdownError")
    except BaseException as e:  # any other error is a failure of the test
        failures.append(f"thread {idx}: {type(e).__name__}: {e}")


@pytest.mark.parametrize("mode", ["caller-runs", "handoff", "no-control"])
def test_close_races_with_forty_calling_threads(mode):
    repetitions = 12
    for rep in range(repetitions):
        mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=2,
                             max_threads=4, window_s=0.02, control=mode != "no-control",
                             execution="handoff" if mode == "handoff" else "caller-runs",
                             spin_ns=0)
        go = threading.Event()
        closed_seen = [False] * N_THREADS
        accepted, failures, ops_done = [], [], []
        threads = [threading.Thread(target=_caller,
                                    args=(mw, i, go, closed_seen, accepted, failures, ops_done))
                   for i in range(N_THREADS)]
        for t in threads:
            t.start()
        go.set()
        # Close while the calls flow: after a varying number of operations.
        target = 50 + 40 * rep
        deadline = time.monotonic() + 30
        while len(ops_done) < target and time.monotonic() < deadline and not failures:
            time.sleep(0.001)
        second = threading.Thread(target=mw.close)  # two closers at once
        second.start()
        mw.close()
        second.join()
        assert not mw.core.running
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a calling thread hung after close"
        assert failures == []
        assert all(closed_seen)
        # Every accepted async request completed by the time close() returned.
        assert all(f.done() for f in accepted)
        for f in accepted:
            exc = f.exception()
            assert exc is None, f"an accepted request failed: {exc!r}"
        with pytest.raises(errors.ShutdownError):
            mw.submit("get", b"k0")


def test_close_waits_for_pending_callbacks():
    mw = nvmw.Middleware(engine="memory", interactive_threads=1, batch_threads=1,
                         device="optane-1dimm")
    futures = [mw.submit("put", b"p%d" % i, b"v" * 4096, cls="batch") for i in range(300)]
    mw.close()
    # close() returned: every accepted request has run and its future is resolved.
    assert all(f.done() for f in futures)
    assert all(f.exception() is None for f in futures)


def test_a_submitted_request_cannot_be_cancelled():
    # An accepted request runs whatever happens: cancel() said True for a put that was
    # then applied, and its completion then failed on the cancelled future ("Exception
    # ignored in: 'nvmw completion callback'", InvalidStateError).
    engine = nvmw.open_engine("memory")
    with nvmw.Middleware(engine=engine, interactive_threads=1, batch_threads=1) as mw:
        gate = threading.Event()
        mw.core.submit(0, b"x", b"", 1, lambda error, value: gate.wait(60))  # the batch worker
        fut = mw.submit("put", b"k", b"v", cls="batch")
        assert not fut.cancel()
        assert fut.running() and not fut.cancelled()
        gate.set()
        assert fut.result(60) is None
    assert engine.get(b"k") == b"v"


def test_calls_after_close_raise_shutdown_error():
    mw = nvmw.Middleware(engine="memory")
    core = mw.core
    mw.close()
    calls = [lambda: core.get(b"k", 2), lambda: core.put(b"k", b"v", 2),
             lambda: core.remove(b"k", 2), lambda: core.submit(0, b"k", b"", 2, lambda e, v: None),
             core.get_stats, core.get_state, lambda: core.wait_for_window(0, 1.0),
             lambda: core.perform_action(0), lambda: core.set_threads(1, 1),
             lambda: core.threads, lambda: core.queue_length(0), lambda: core.classify(0, 0, 2)]
    for call in calls:
        with pytest.raises(errors.ShutdownError):
            call()
    assert core.engine is None
    assert not core.running


def test_close_while_ycsb_generator_drives_it():
    mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=1)
    work = YcsbWorkload(mw, YcsbConfig(record_count=200, operation_count=0, duration_s=120.0,
                                       threads=8))
    work.load()
    work.start()
    # Let the clients run, then pull the middleware from under them.
    seq = mw.get_stats()["seq"]
    mw.wait_for_window(seq, timeout_s=30)
    mw.close()
    result = work.join()  # ends at the first ShutdownError of each client, not after 120 s
    assert not work.running
    assert result["all"]["ops"] > 0
    assert result["all"]["errors"] >= 1
    assert "Shutdown" in result["first_error"]
    del work  # the generator held the last reference: freed here, with the GIL held
    with pytest.raises(errors.ShutdownError):
        mw.get(b"k")


def test_generator_keeps_an_unreferenced_middleware_alive():
    core = _core.Middleware(_core.new_memory_engine(), 1, 1)
    gen = _core.YcsbGenerator(core, YcsbConfig(record_count=50, operation_count=400,
                                                threads=4).to_options())
    del core  # the generator shares ownership: the middleware keeps running for it
    gen.load()
    result = gen.run()
    assert result["all"]["ops"] == 400
    assert result["all"]["errors"] == 0
    del gen  # last holder: stops and frees the middleware


def test_close_while_trace_replay_drives_it():
    mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=1)
    trace = traces.synth("azure", rows=2000, seed=3)
    replay = _core.Replay(trace, traces.replay_options(threads=8, loop=True, duration_s=120.0,
                                                       accel=50.0))
    replay.start(mw.core)
    seq = mw.get_stats()["seq"]
    mw.wait_for_window(seq, timeout_s=30)
    mw.close()
    result = replay.join()  # clients stop at their first ShutdownError
    assert not replay.running
    assert result["stopped"]
    assert result["all"]["ops"] > 0
    with pytest.raises(errors.ShutdownError):
        replay.start(mw.core)
    del replay


def test_replay_holds_the_middleware_after_python_drops_it():
    core = _core.Middleware(_core.new_memory_engine(), 2, 1)
    trace = traces.synth("azure", rows=300, seed=5)
    replay = _core.Replay(trace, traces.replay_options(threads=4, accel=200.0))
    replay.start(core)
    del core
    result = replay.join()
    assert result["all"]["ops"] == len(trace)
    assert result["errors"] == 0


def test_exit_with_async_work_pending():
    child = _run_child("""
        import atexit, threading

        futures, done = [], []

        def after_nvmw():  # registered first, so it runs after the module's own exit hook
            print("pending-after-hook", sum(not f.done() for f in futures),
                  "callbacks", len(done), flush=True)

        atexit.register(after_nvmw)
        import nvmw
        from nvmw import errors

        mw = nvmw.Middleware(engine="memory", interactive_threads=1, batch_threads=1,
                             device="optane-1dimm")
        for i in range(2000):
            f = mw.submit("put", b"k%d" % i, b"v" * 8192, cls="batch")
            f.add_done_callback(lambda f: done.append(f.exception()))
            futures.append(f)

        def submitter():  # a daemon thread still calling in when the interpreter exits
            while True:
                try:
                    mw.put(b"d", b"x" * 1024)
                    mw.submit("get", b"d")
                except errors.ShutdownError:
                    return

        threading.Thread(target=submitter, daemon=True).start()

        @atexit.register
        def before_nvmw():  # runs before the module's exit hook (atexit is LIFO)
            print("pending-before-hook", sum(not f.done() for f in futures), flush=True)
        print("exiting", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "exiting" in child.stdout
    # Every request accepted before exit completed, with its callback, before finalization.
    assert "pending-after-hook 0 callbacks 2000" in child.stdout, child.stdout


def test_exit_with_daemon_threads_inside_calls():
    child = _run_child("""
        import threading
        import nvmw
        from nvmw import errors
        from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

        mw = nvmw.Middleware(engine="memory", interactive_threads=1, batch_threads=1,
                             window_s=0.05, device="optane-1dimm")
        started = threading.Barrier(13)

        def caller(i):
            started.wait()
            while True:
                try:
                    if i % 3 == 0:
                        mw.wait_for_window(mw.get_stats()["seq"], timeout_s=60)
                    elif i % 3 == 1:
                        mw.put(b"k%d" % i, b"v" * 4096, cls="batch")
                    else:
                        mw.submit("get", b"k%d" % i).result()
                except errors.ShutdownError:
                    return

        work = YcsbWorkload(mw, YcsbConfig(record_count=100, operation_count=0,
                                           duration_s=600.0, threads=4))
        work.load()
        threading.Thread(target=work.run, daemon=True).start()
        for i in range(12):
            threading.Thread(target=caller, args=(i,), daemon=True).start()
        started.wait()
        print("exiting", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "exiting" in child.stdout


def test_gc_with_callbacks_pending():
    child = _run_child("""
        import gc
        from nvmw import _core

        calls = []
        for round in range(5):
            core = _core.Middleware(_core.new_memory_engine(), 1, 1)
            for i in range(3000):
                core.submit(1, b"k%d" % i, b"v" * 512, 1, lambda e, v: calls.append(e))
            del core  # last reference, callbacks pending: stops with the GIL released
            gc.collect()
        assert len(calls) == 5 * 3000, len(calls)
        assert all(e is None for e in calls)

        # The same through a reference cycle, freed by the collector.
        class Holder:
            pass
        h = Holder()
        h.self = h
        h.core = _core.Middleware(_core.new_memory_engine(), 1, 1)
        for i in range(3000):
            h.core.submit(1, b"c%d" % i, b"v" * 512, 1, lambda e, v: calls.append(e))
        del h
        gc.collect()
        assert len(calls) == 6 * 3000, len(calls)
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


def test_dropping_a_generator_or_replay_with_callbacks_pending():
    # Clients wait for interactive permits held by async requests whose completions
    # need the GIL, while the thread that frees the generator (or replay) holds it.
    child = _run_child("""
        from nvmw import _core
        from nvmw.workloads import traces
        from nvmw.workloads.ycsb import YcsbConfig

        calls = []
        core = _core.Middleware(_core.new_memory_engine(), 1, 1)
        core.put(b"a", b"v" * 64, 0)
        for round in range(4):
            if round % 2 == 0:
                driver = _core.YcsbGenerator(core, YcsbConfig(
                    record_count=20, operation_count=0, duration_s=600.0, threads=8,
                    read_proportion=1.0, update_proportion=0.0).to_options())
                driver.load()
                driver.start()
            else:
                driver = _core.Replay(traces.synth("azure", rows=500, seed=round),
                                      traces.replay_options(threads=8, loop=True,
                                                            duration_s=600.0, accel=100.0))
                driver.start(core)
            for i in range(3000):
                core.submit(0, b"a", b"", 0, lambda e, v: calls.append(e))
            driver.stop()
            del driver  # joins its clients: must not hold the GIL while doing so
        core.stop()
        assert len(calls) == 4 * 3000, len(calls)
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


# A child that deadlocks in these never exits; one that works needs about a second.
CALLBACK_CHILD_TIMEOUT_S = 120


def _run_callback_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_child_env(),
                          capture_output=True, text=True, timeout=CALLBACK_CHILD_TIMEOUT_S)


@pytest.mark.parametrize("control, execution", [(True, "caller-runs"), (True, "handoff"),
                                                (False, "caller-runs")])
def test_close_from_inside_a_completion_callback(control, execution):
    # close() waited for every accepted request, the one whose callback called it too:
    # the worker (or, without control, the submitting caller) waited for itself.
    child = _run_callback_child(f"""
        import threading
        import nvmw
        from nvmw import errors

        mw = nvmw.Middleware(engine="memory", control={control}, execution="{execution}")
        mw.put(b"k", b"v")
        closed = threading.Event()
        seen = []

        def callback(error, value):
            mw.close()
            seen.append(value)
            closed.set()

        pending = [mw.submit("get", b"k") for _ in range(50)]
        mw.core.submit(0, b"k", b"", 0, callback)
        assert closed.wait(60)
        try:
            mw.get(b"k")
        except errors.ShutdownError:
            pass
        else:
            raise AssertionError("a call after close() succeeded")
        mw.close()  # from this thread: waits for the drain begun by the callback
        assert not mw.core.running
        assert seen == [b"v"]
        assert all(f.result(60) == b"v" for f in pending)
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


@pytest.mark.parametrize("execution, device", [("caller-runs", None), ("handoff", None),
                                               ("caller-runs", "optane-1dimm")])
def test_a_forked_child_is_refused_the_parents_middleware(execution, device, shm_dir):
    # A child of fork() has none of the middleware's threads (workers, monitor, the
    # device's timer): its submits never completed, its hand-off calls hung, close() and
    # the exit hook crashed it (SIGSEGV) joining threads it does not have, and its puts
    # went into the pool the parent has open.
    path = os.path.join(shm_dir, "t.pool")
    child = _run_callback_child(f"""
        import os, sys
        import nvmw
        from nvmw import errors

        mw = nvmw.Middleware({path!r}, pool_size=64 << 20, execution="{execution}",
                             device={device!r}, window_s=0.05)
        left_open = nvmw.Middleware(engine="memory")  # the child's exit hook meets it
        engine = nvmw.open_engine("memory")
        mw.put(b"k", b"parent")
        pid = os.fork()
        if pid == 0:
            calls = {{"get": lambda: mw.get(b"k"), "put": lambda: mw.put(b"k", b"child"),
                     "submit": lambda: mw.submit("put", b"k", b"child"),
                     "set_threads": lambda: mw.set_threads(2, 1), "stats": mw.get_stats,
                     "enter": mw.__enter__, "its engine": lambda: mw.engine.put(b"k", b"child"),
                     "engine": lambda: engine.get(b"k"),
                     "Middleware": lambda: nvmw.Middleware(engine=engine)}}
            for name, call in calls.items():
                try:
                    call()
                    print(name, "ran", flush=True)
                except errors.NotSupportedError as e:
                    print(name, "refused" if "fork()" in str(e) else e, flush=True)
            mw.close()  # lets go of the child's copy; the parent's goes on
            mw.close()
            sys.exit(0)  # the exit hook runs, left_open still open
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
        assert mw.get(b"k") == b"parent"
        assert mw.submit("get", b"k").result(60) == b"parent"
        assert mw.set_threads(2, 2) == (2, 2)
        mw.close()
        left_open.close()
        print("parent ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    for name in ("get", "put", "submit", "set_threads", "stats", "enter", "its engine",
                 "engine", "Middleware"):
        assert f"{name} refused" in lines, child.stdout
    assert "child status 0" in lines, child.stdout
    assert "parent ok" in lines, child.stdout + child.stderr


def test_a_forked_child_is_refused_the_parents_generator_and_replay():
    # Their client threads, and the middleware's, run in the parent: in the child, a
    # join waited forever for clients it does not have, a start ran clients against a
    # middleware without workers, and freeing them at exit hung joining those clients.
    child = _run_callback_child("""
        import os, sys
        import nvmw
        from nvmw import _core, errors
        from nvmw.workloads import traces
        from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

        mw = nvmw.Middleware(engine="memory", interactive_threads=2, batch_threads=1)
        running = YcsbWorkload(mw, YcsbConfig(record_count=100, operation_count=0,
                                              duration_s=120.0, threads=2))
        running.load()
        running.start()
        idle = YcsbWorkload(mw, YcsbConfig(record_count=100, operation_count=100, threads=2))
        replay = _core.Replay(traces.synth("azure", rows=2000, seed=3),
                              traces.replay_options(threads=2, loop=True, duration_s=120.0))
        replay.start(mw.core)
        pid = os.fork()
        if pid == 0:
            for name, call in {"join": running.join, "start": idle.start,
                               "replay join": replay.join}.items():
                try:
                    call()
                    print(name, "ran", flush=True)
                except errors.NotSupportedError as e:
                    print(name, "refused" if "fork()" in str(e) else e, flush=True)
            sys.exit(0)  # frees the generators and the replay
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
        mw.close()
        assert running.join()["all"]["ops"] > 0
        assert replay.join()["all"]["ops"] > 0
        print("parent ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    for name in ("join", "start", "replay join"):
        assert f"{name} refused" in lines, child.stdout
    assert "child status 0" in lines, child.stdout
    assert "parent ok" in lines, child.stdout
    assert "leaked" not in child.stderr


@pytest.mark.parametrize("holder", ["core", "wrapper"])
def test_last_reference_dropped_by_a_completion_callback(holder, shm_dir):
    # The callback held the last reference to its middleware: freeing it after the
    # call stopped the middleware on its own worker, which waited for itself (the
    # wrapper's close() hung the process; the core's destructor hung the worker, and
    # the pool stayed open). The pool can be opened again once the middleware is freed.
    pool = os.path.join(shm_dir, "cb.pool")
    make = ("_core.Middleware(_core.open_pmem_engine(POOL, 8 << 20), 1, 1)" if holder == "core"
            else "nvmw.Middleware(POOL, pool_size=8 << 20)")
    core = "mw" if holder == "core" else "mw.core"
    child = _run_callback_child(f"""
        import time
        import nvmw
        from nvmw import _core, errors

        POOL = {pool!r}
        for round in range(3):
            mw = {make}
            {core}.submit(1, b"k", b"v", 0, lambda error, value, mw=mw: None)
            del mw
            deadline = time.monotonic() + 60
            while True:
                try:
                    engine = _core.open_pmem_engine(POOL, 8 << 20)
                    break
                except errors.StorageIOError:  # still open: the middleware lives on
                    assert time.monotonic() < deadline, "the middleware was never freed"
                    time.sleep(0.01)
            assert engine.get(b"k") == b"v"
            del engine
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout
    assert "leaked" not in child.stderr


def test_sync_call_from_a_completion_callback_is_refused():
    # A Future's done-callback runs on the worker that completed the request, holding
    # the class's only permit: a synchronous call of that class waited for it forever.
    child = _run_callback_child("""
        import threading
        import nvmw
        from nvmw import errors

        with nvmw.Middleware(engine="memory", interactive_threads=1) as mw:
            raised = []
            done = threading.Event()

            def then(fut):
                try:
                    mw.put(b"x", b"y", cls="interactive")
                except errors.NotSupportedError as e:
                    raised.append(str(e))
                done.set()

            # The only interactive worker waits until the done-callback is attached: a get
            # that completed before would run it on this thread, where put is allowed.
            gate = threading.Event()
            mw.core.submit(0, b"k", b"", 0, lambda error, value: gate.wait(60))
            mw.submit("get", b"k", cls="interactive").add_done_callback(then)
            gate.set()
            assert done.wait(60)
            assert raised and "submit the request instead" in raised[0], raised
            # Asynchronous calls from a callback are fine.
            inner = []
            mw.submit("put", b"a", b"1").add_done_callback(
                lambda f: inner.append(mw.submit("get", b"a")))
            while not inner:
                pass
            assert inner[0].result(60) == b"1"
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


def test_sync_call_from_a_nested_completion_callback_is_refused():
    # A callback of a controlled middleware submits to a no-control one, whose callback
    # runs inline, nested, and calls back into the first: only the innermost middleware
    # was known, so the call waited for the interactive permit its own thread held.
    child = _run_callback_child("""
        import threading
        import nvmw
        from nvmw import errors

        outer = nvmw.Middleware(engine="memory", interactive_threads=1)
        inner = nvmw.Middleware(engine="memory", control=False)
        outer.put(b"k", b"v")
        raised = []
        done = threading.Event()

        def nested(error, value):
            for call in (lambda: outer.get(b"k", cls="interactive"),
                         lambda: outer.put(b"k", b"w", cls="batch"),
                         lambda: inner.exists(b"k")):
                try:
                    call()
                except errors.NotSupportedError as e:
                    raised.append(str(e))
            done.set()

        outer.core.submit(0, b"k", b"", 0,
                          lambda error, value: inner.core.submit(0, b"k", b"", 0, nested))
        assert done.wait(60)
        assert len(raised) == 3, raised
        assert outer.get(b"k") == b"v"  # outside a callback the same calls work
        outer.close()
        inner.close()
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


def test_no_control_callback_never_waits_for_its_middleware():
    # Without control the callback runs on the submitting thread, holding one of the
    # shared permits: with a bound of 1, a synchronous call or a submit from it waited
    # for that permit, that is for itself.
    child = _run_callback_child("""
        import nvmw
        from nvmw import errors

        mw = nvmw.Middleware(engine="memory", control=False, no_control_max_inflight=1)
        mw.put(b"k", b"v")
        seen = []

        def callback(error, value):
            try:
                mw.get(b"k")
            except errors.NotSupportedError:
                seen.append("get refused")
            try:
                mw.core.submit(0, b"k", b"", 0, lambda e, v: seen.append("nested ran"))
            except errors.OverloadedError:
                seen.append("submit overloaded")
            seen.append(value)

        mw.core.submit(0, b"k", b"", 0, callback)  # runs inline: done when it returns
        assert seen == ["get refused", "submit overloaded", b"v"], seen
        assert mw.get(b"k") == b"v"
        mw.close()
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


# A generator or replay whose interactive clients keep the class (limit 1) busy: they
# queue for the permit that a callback's worker holds while the callback runs.
_DRIVER = """
    import threading
    import nvmw
    from nvmw import _core, errors
    from nvmw.workloads import traces
    from nvmw.workloads.ycsb import YcsbConfig

    KIND = {driver!r}
    core = _core.Middleware(_core.new_memory_engine(), 1, 1)
    core.put(b"a", b"v", 0)
    if KIND == "ycsb":
        driver = _core.YcsbGenerator(core, YcsbConfig(
            record_count=20, operation_count=0, duration_s=600.0, threads=8,
            read_proportion=1.0, update_proportion=0.0).to_options())
        driver.load()
        driver.start()
    else:
        driver = _core.Replay(traces.synth("azure", rows=500, seed=1),
                              traces.replay_options(threads=8, loop=True, duration_s=600.0,
                                                    accel=1e6))
        driver.start(core)
    # The clients have begun: some request done (replay), or waiting for the one
    # interactive permit (ycsb); a callback submitted before then could stop them with
    # nothing done.
    while KIND == "replay" and driver.completed == 0:
        pass
    while KIND == "ycsb" and core.queue_length(0) == 0:
        pass
    done = threading.Event()
"""


@pytest.mark.parametrize("driver", ["ycsb", "replay"])
def test_running_generator_or_replay_freed_inside_its_callback(driver):
    # The callback dropped the last reference to a running generator (replay) of its
    # middleware: freeing it stopped and joined the clients on the callback's worker,
    # and a client waiting for the permit that worker held never ended.
    child = _run_callback_child(_DRIVER.format(driver=driver) + """
    holder = [driver]
    del driver

    def callback(error, value):
        holder.clear()  # the last reference
        done.set()

    core.submit(0, b"a", b"", 0, callback)
    assert done.wait(60)
    core.stop()  # the clients were told to stop: nothing is left to drain for
    print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout
    assert "leaking" not in child.stderr


@pytest.mark.parametrize("driver", ["ycsb", "replay"])
def test_generator_or_replay_waits_are_refused_inside_its_callback(driver):
    # join() (or run, start, load, results) from a callback of the middleware waited for
    # clients that waited for the permit of the callback's worker. stop() is allowed.
    calls = ("join", "run", "start", "load", "results") if driver == "ycsb" else ("join", "run", "start")
    child = _run_callback_child(_DRIVER.format(driver=driver) + f"""
    CALLS = {calls!r}
    refused = []

    def callback(error, value):
        driver.stop()
        for name in CALLS:
            call = getattr(driver, name)
            try:
                call(core) if KIND == "replay" and name != "join" else call()
            except errors.NotSupportedError:
                refused.append(name)
        done.set()

    core.submit(0, b"a", b"", 0, callback)
    assert done.wait(60)
    assert tuple(refused) == CALLS, refused
    result = driver.join()  # from this thread: the clients have stopped
    assert result["all"]["ops"] > 0
    core.stop()
    print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout
