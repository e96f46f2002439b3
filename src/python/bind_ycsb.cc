// Python bindings of the YCSB-style generator (`_core.YcsbGenerator`) and the
// generator-capacity probe (`_core.ycsb_capacity`). Options travel as a dict whose
// keys are the YcsbOptions field names; every blocking call releases the GIL.
#include <nanobind/stl/string.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "nvmw/ycsb.h"
#include "python/bind.h"
#include "python/interrupt.h"

namespace nvmw::py {

namespace {

uint64_t NonNegativeInt(const char* name, nb::handle v) {
  return OptionUint(std::string("ycsb: ") + name, v);
}

YcsbOptions OptionsFromDict(const nb::dict& d) {
  YcsbOptions o;
  for (auto [k, v] : d) {
    const std::string key = OptionName("ycsb", k);
    if (v.is_none()) continue;  // keep the default
    if (key == "record_count") o.record_count = NonNegativeInt("record_count", v);
    else if (key == "operation_count") o.operation_count = NonNegativeInt("operation_count", v);
    else if (key == "duration_s") o.duration_s = OptionAs<double>("ycsb: " + key, v);
    else if (key == "read_proportion") o.read_proportion = OptionAs<double>("ycsb: " + key, v);
    else if (key == "update_proportion") o.update_proportion = OptionAs<double>("ycsb: " + key, v);
    else if (key == "insert_proportion") o.insert_proportion = OptionAs<double>("ycsb: " + key, v);
    else if (key == "distribution") ThrowIfError(ParseKeyDistribution(OptionAs<std::string>("ycsb: " + key, v), &o.distribution));
    else if (key == "zipfian_constant") o.zipfian_constant = OptionAs<double>("ycsb: " + key, v);
    else if (key == "value_bytes") {
      const uint64_t b = NonNegativeInt("value_bytes", v);
      if (b > (1ull << 30)) ThrowIfError(Status::InvalidArgument("ycsb: value_bytes above 1 GiB"));
      o.value_bytes = static_cast<uint32_t>(b);
    }
    else if (key == "threads") o.threads = static_cast<int>(std::min<uint64_t>(NonNegativeInt("threads", v), 1u << 30));
    else if (key == "load_threads") o.load_threads = static_cast<int>(std::min<uint64_t>(NonNegativeInt("load_threads", v), 1u << 30));
    else if (key == "target_ops_per_s") o.target_ops_per_s = OptionAs<double>("ycsb: " + key, v);
    else if (key == "request_class") ThrowIfError(ParseRequestClass(OptionAs<std::string>("ycsb: " + key, v), &o.request_class));
    else if (key == "seed") o.seed = NonNegativeInt("seed", v);
    else if (key == "interval_s") o.interval_s = OptionAs<double>("ycsb: " + key, v);
    else ThrowIfError(Status::InvalidArgument("ycsb: unknown option '" + key + "'"));
  }
  ThrowIfError(YcsbGenerator::Validate(o));
  return o;
}

nb::dict OpStatsToDict(const YcsbOpStats& s) {
  nb::dict d;
  d["ops"] = s.ops;
  d["errors"] = s.errors;
  d["not_found"] = s.not_found;
  d["ops_per_s"] = s.ops_per_s;
  d["mean_us"] = s.mean_us;
  d["min_us"] = s.min_us;
  d["max_us"] = s.max_us;
  d["p50_us"] = s.p50_us;
  d["p99_us"] = s.p99_us;
  d["p999_us"] = s.p999_us;
  return d;
}

nb::dict ResultsToDict(const YcsbResults& r) {
  nb::dict d;
  d["elapsed_s"] = r.elapsed_s;
  d["all"] = OpStatsToDict(r.all);
  d["read"] = OpStatsToDict(r.read);
  d["update"] = OpStatsToDict(r.update);
  d["insert"] = OpStatsToDict(r.insert);
  nb::list intervals;
  for (const auto& iv : r.intervals) {
    nb::dict i;
    i["start_s"] = iv.start_s;
    i["ops"] = iv.ops;
    i["ops_per_s"] = iv.ops_per_s;
    i["p50_us"] = iv.p50_us;
    i["p99_us"] = iv.p99_us;
    i["mean_us"] = iv.mean_us;
    intervals.append(i);
  }
  d["intervals"] = intervals;
  d["records_loaded"] = r.records_loaded;
  d["load_s"] = r.load_s;
  d["first_error"] = r.first_error;
  return d;
}

// The generator shares the middleware: closing it ends the run (clients stop at
// their first ShutdownError) but never frees what a client thread is calling.
std::shared_ptr<Middleware> RunningMiddleware(PyMiddleware& h) {
  if (!h.mw || !h.mw->running()) ThrowIfError(Status::Shutdown("ycsb: middleware is not running"));
  RefuseAfterFork(h.fork_generation, "ycsb", "middleware");
  return h.mw;
}

// Freed by Python with the GIL held. The clients are joined with it released: a client
// waiting for a permit may be waiting for an async request whose completion needs it.
// Freed inside a completion callback of its middleware (the callback dropped the last
// reference), the core's destructor stops the clients and leaves joining them to a
// thread of its own (the exit hook waits for it). Freed in a child forked after it was
// made, it is left alone (leaked): its clients, and its middleware's threads, do not
// exist there.
struct PyYcsbGenerator {
  PyYcsbGenerator(const YcsbOptions& o, std::shared_ptr<Middleware> m)
      : mw(m.get()), gen(std::make_unique<YcsbGenerator>(o, std::move(m))) {}
  ~PyYcsbGenerator() {
    if (fork_generation != ForkGeneration()) {
      (void)gen.release();
      // It holds the middleware, whose box holds the engine's Python object: not a
      // reference counting error for nanobind to report at exit.
      nb::set_leak_warnings(false);
      return;
    }
    gen->Stop();
    if (mw->InCompletion()) return;  // ~YcsbGenerator defers the join
    if (ShouldReleaseGil()) {
      nb::gil_scoped_release release;
      (void)gen->Join();
    } else {
      (void)gen->Join();
    }
  }

  const Middleware* mw;  // identity only; kept alive by the generator, which shares it
  std::unique_ptr<YcsbGenerator> gen;
  const uint64_t fork_generation = ForkGeneration();
};

// A call that waits for the clients (load, start, join, run, results) would, inside
// one of the middleware's completion callbacks, wait for clients that may wait for
// the permit of the thread running it.
YcsbGenerator& Waitable(PyYcsbGenerator& g, const char* what) {
  RefuseAfterFork(g.fork_generation, what, "generator");
  RefuseInsideCompletion(*g.mw, what);
  return *g.gen;
}

// Waits for the clients in slices; Ctrl-C stops them (each finishes its request),
// joins them and raises KeyboardInterrupt.
void JoinInterruptibly(YcsbGenerator& g) {
  try {
    WaitInterruptibly([&] { return PollFor([&] { return !g.running(); }); }, [&] { g.Stop(); });
  } catch (nb::python_error&) {
    {
      CallWithoutGil release;
      g.Join();  // the clients have ended: results() reports what they did
    }
    throw;
  }
  CallWithoutGil release;
  g.Join();
}

nb::dict JoinedResults(YcsbGenerator& g) {
  YcsbResults r;
  Status s;
  {
    // Results waits while another thread's join() holds the generator, and that join
    // may wait for a completion that needs the GIL.
    CallWithoutGil release;
    s = g.Results(&r);
  }
  ThrowIfError(s);
  return ResultsToDict(r);
}

}  // namespace

void BindYcsb(nb::module_& m) {
  nb::class_<PyYcsbGenerator>(m, "YcsbGenerator",
                            "YCSB-style closed-loop generator driving a Middleware. Options: a "
                            "dict of YcsbOptions fields (see nvmw.workloads.ycsb.YcsbConfig). In a "
                            "completion callback of that middleware only stop() and running are "
                            "allowed (the other calls wait for the clients: NotSupportedError).")
      .def(
          "__init__",
          [](PyYcsbGenerator* self, PyMiddleware& h, const nb::dict& options) {
            YcsbOptions o = OptionsFromDict(options);
            new (self) PyYcsbGenerator(o, RunningMiddleware(h));
          },
          nb::arg("middleware"), nb::arg("options"))
      .def(
          "load",
          [](PyYcsbGenerator& pg) {
            YcsbGenerator& g = Waitable(pg, "ycsb: load");
            Status s = RunInterruptibly([&] { return g.Load(); }, [&] { g.Stop(); });
            ThrowIfError(s);
            // The load's own figures. Another thread may have started the run since; then
            // Results says NotSupported until it is joined, but fills these in anyway.
            YcsbResults r;
            {
              CallWithoutGil release;
              (void)g.Results(&r);
            }
            nb::dict d;
            d["records_loaded"] = r.records_loaded;
            d["load_s"] = r.load_s;
            d["first_error"] = r.first_error;
            return d;
          },
          "Insert the records (load phase); returns records_loaded, load_s and first_error.\n"
          "Ctrl-C stops the loaders and raises KeyboardInterrupt.")
      .def(
          "start",
          [](PyYcsbGenerator& pg) {
            YcsbGenerator& g = Waitable(pg, "ycsb: start");
            Status s;
            {
              CallWithoutGil release;
              s = g.Start();
            }
            ThrowIfError(s);
          },
          "Start the client threads in the background.")
      .def("stop", [](PyYcsbGenerator& g) { g.gen->Stop(); }, "Ask the clients to finish (non-blocking).")
      .def(
          "join",
          [](PyYcsbGenerator& pg) {
            YcsbGenerator& g = Waitable(pg, "ycsb: join");
            JoinInterruptibly(g);
            return JoinedResults(g);
          },
          "Wait for the clients; return the results dict. Ctrl-C stops the clients and\n"
          "raises KeyboardInterrupt (results() then holds what they did).")
      .def(
          "run",
          [](PyYcsbGenerator& pg) {
            YcsbGenerator& g = Waitable(pg, "ycsb: run");
            Status s;
            {
              CallWithoutGil release;
              s = g.Start();
            }
            ThrowIfError(s);
            JoinInterruptibly(g);
            return JoinedResults(g);
          },
          "Start + join; returns the results dict (Ctrl-C as for join).")
      .def("results", [](PyYcsbGenerator& g) { return JoinedResults(Waitable(g, "ycsb: results")); },
           "Results of a joined run (or of the load phase only).")
      .def_prop_ro("running", [](PyYcsbGenerator& g) { return g.gen->running(); });

  m.def(
      "ycsb_capacity",
      [](const nb::dict& options, const std::string& target, int middleware_threads) {
        YcsbOptions o = OptionsFromDict(options);
        CapacityTarget t;
        if (target == "direct") t = CapacityTarget::kDirect;
        else if (target == "no-control") t = CapacityTarget::kNoControl;
        else if (target == "middleware") t = CapacityTarget::kMiddleware;
        else {
          ThrowIfError(Status::InvalidArgument(
              "ycsb: capacity target must be direct, no-control or middleware, not '" + target + "'"));
          return nb::dict();
        }
        YcsbResults r;
        std::atomic<bool> cancel{false};
        Status s = RunInterruptibly(
            [&] { return MeasureGeneratorCapacity(o, t, middleware_threads, &r, &cancel); },
            [&] { cancel.store(true); });
        ThrowIfError(s);
        return ResultsToDict(r);
      },
      nb::arg("options"), nb::arg("target") = "direct", nb::arg("middleware_threads") = 2,
      "Run the generator against a no-op engine (directly or through a middleware) and "
      "return its results: the most ops/s one generator can issue here.");
}

}  // namespace nvmw::py
