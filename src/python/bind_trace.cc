// Python bindings of the traces (`_core.Trace`, readers, synthesis, filters,
// transforms) and of the open-loop replay (`_core.Replay`). Options travel as
// dicts keyed by the C++ option field names; blocking calls release the GIL.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "nvmw/replay.h"
#include "nvmw/trace.h"
#include "python/bind.h"
#include "python/interrupt.h"

namespace nvmw::py {

namespace {

[[noreturn]] void Bad(const std::string& msg) {
  ThrowIfError(Status::InvalidArgument(msg));
  throw std::logic_error(msg);  // unreachable: ThrowIfError raised
}

uint64_t ToUint(const char* what, const std::string& key, nb::handle v) {
  return OptionUint(std::string(what) + ": " + key, v);
}

TraceFormat ToFormat(const std::string& name) {
  TraceFormat f;
  ThrowIfError(ParseTraceFormat(name, &f));
  return f;
}

TraceOp ToOp(const std::string& op) {
  if (op == "read" || op == "r" || op == "get") return TraceOp::kRead;
  if (op == "write" || op == "w" || op == "put") return TraceOp::kWrite;
  Bad("trace: op '" + op + "' is not read or write");
}

RequestClass ToClass(const std::string& cls) {
  if (cls == "interactive") return RequestClass::kInteractive;
  if (cls == "batch") return RequestClass::kBatch;
  if (cls == "auto") return RequestClass::kAuto;
  Bad("replay: class '" + cls + "' is not interactive, batch or auto");
}

AzureSynthOptions AzureFromDict(const nb::dict& d) {
  AzureSynthOptions o;
  for (auto [k, v] : d) {
    std::string key = OptionName("azure synth", k);
    if (v.is_none()) continue;
    if (key == "rows") o.rows = ToUint("azure synth", key, v);
    else if (key == "seed") o.seed = ToUint("azure synth", key, v);
    else if (key == "accesses_per_s") o.accesses_per_s = OptionAs<double>("azure synth: " + key, v);
    else if (key == "new_blob_fraction") o.new_blob_fraction = OptionAs<double>("azure synth: " + key, v);
    else if (key == "write_fraction") o.write_fraction = OptionAs<double>("azure synth: " + key, v);
    else if (key == "start_unix_ms") o.start_unix_ms = OptionAs<int64_t>("azure synth: " + key, v);
    else if (key == "max_blob_bytes") o.max_blob_bytes = ToUint("azure synth", key, v);
    else Bad("azure synth: unknown option '" + key + "'");
  }
  return o;
}

SvdSynthOptions SvdFromDict(const nb::dict& d) {
  SvdSynthOptions o;
  for (auto [k, v] : d) {
    std::string key = OptionName("svd synth", k);
    if (v.is_none()) continue;
    if (key == "rows") o.rows = ToUint("svd synth", key, v);
    else if (key == "seed") o.seed = ToUint("svd synth", key, v);
    else if (key == "tasks") o.tasks = static_cast<int>(std::min<uint64_t>(ToUint("svd synth", key, v), 1u << 30));
    else if (key == "block_bytes") o.block_bytes = ToUint("svd synth", key, v);
    else if (key == "r_bytes") o.r_bytes = ToUint("svd synth", key, v);
    else if (key == "stacked_r_bytes") o.stacked_r_bytes = ToUint("svd synth", key, v);
    else if (key == "factor_bytes") o.factor_bytes = ToUint("svd synth", key, v);
    else if (key == "singular_values_bytes") o.singular_values_bytes = ToUint("svd synth", key, v);
    else if (key == "task_ms") o.task_ms = OptionAs<double>("svd synth: " + key, v);
    else if (key == "gap_between_jobs_ms") o.gap_between_jobs_ms = OptionAs<double>("svd synth: " + key, v);
    else Bad("svd synth: unknown option '" + key + "'");
  }
  return o;
}

TraceFilter FilterFromDict(const nb::dict& d) {
  TraceFilter f;
  for (auto [k, v] : d) {
    std::string key = OptionName("trace filter", k);
    if (v.is_none()) continue;
    if (key == "start_s") f.start_s = OptionAs<double>("trace filter: " + key, v);
    else if (key == "end_s") f.end_s = OptionAs<double>("trace filter: " + key, v);
    else if (key == "min_bytes") f.min_bytes = ToUint("trace filter", key, v);
    else if (key == "max_bytes") f.max_bytes = ToUint("trace filter", key, v);
    else if (key == "max_records") f.max_records = ToUint("trace filter", key, v);
    else if (key == "rebase") f.rebase = OptionAs<bool>("trace filter: " + key, v);
    else Bad("trace filter: unknown option '" + key + "'");
  }
  return f;
}

TraceTransform TransformFromDict(const nb::dict& d) {
  TraceTransform t;
  for (auto [k, v] : d) {
    std::string key = OptionName("trace transform", k);
    if (v.is_none()) continue;
    if (key == "fixed_bytes") {
      const uint64_t b = ToUint("trace transform", key, v);
      if (b > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Bad("trace transform: fixed_bytes must be in [0, 2^63-1]");
      }
      t.fixed_bytes = static_cast<int64_t>(b);
    }
    else if (key == "write_ratio") t.write_ratio = OptionAs<double>("trace transform: " + key, v);
    else if (key == "key_space") t.key_space = ToUint("trace transform", key, v);
    else if (key == "key_prefix") t.key_prefix = OptionAs<std::string>("trace transform: " + key, v);
    else if (key == "seed") t.seed = ToUint("trace transform", key, v);
    else Bad("trace transform: unknown option '" + key + "'");
  }
  return t;
}

ReplayOptions ReplayFromDict(const nb::dict& d) {
  ReplayOptions o;
  for (auto [k, v] : d) {
    std::string key = OptionName("replay", k);
    if (v.is_none()) continue;
    if (key == "threads") o.threads = static_cast<int>(std::min<uint64_t>(ToUint("replay", key, v), 1u << 30));
    else if (key == "cls") o.cls = ToClass(OptionAs<std::string>("replay: " + key, v));
    else if (key == "accel") o.accel = OptionAs<double>("replay: " + key, v);
    else if (key == "loop") o.loop = OptionAs<bool>("replay: " + key, v);
    else if (key == "duration_s") o.duration_s = OptionAs<double>("replay: " + key, v);
    else if (key == "preload") o.preload = OptionAs<bool>("replay: " + key, v);
    else if (key == "preload_threads") o.preload_threads = static_cast<int>(std::min<uint64_t>(ToUint("replay", key, v), 1u << 30));
    else if (key == "seed") o.seed = ToUint("replay", key, v);
    else if (key == "max_value_bytes") o.max_value_bytes = ToUint("replay", key, v);
    else Bad("replay: unknown option '" + key + "'");
  }
  return o;
}

nb::dict SummaryToDict(const TraceSummary& s) {
  nb::dict d;
  d["rows"] = s.rows;
  d["reads"] = s.reads;
  d["writes"] = s.writes;
  d["skipped_rows"] = s.skipped_rows;
  d["distinct_keys"] = s.distinct_keys;
  d["bytes_p50"] = s.bytes_p50;
  d["bytes_p99"] = s.bytes_p99;
  d["bytes_max"] = s.bytes_max;
  d["bytes_mean"] = s.bytes_mean;
  d["duration_s"] = s.duration_s;
  d["accesses_per_s"] = s.accesses_per_s;
  return d;
}

nb::dict OpToDict(const ReplayOpStats& s) {
  nb::dict d;
  d["ops"] = s.ops;
  d["errors"] = s.errors;
  d["not_found"] = s.not_found;
  d["bytes"] = s.bytes;
  d["p50_us"] = s.p50_us;
  d["p99_us"] = s.p99_us;
  d["p999_us"] = s.p999_us;
  d["mean_us"] = s.mean_us;
  d["max_us"] = s.max_us;
  d["service_p50_us"] = s.service_p50_us;
  d["service_p99_us"] = s.service_p99_us;
  d["service_mean_us"] = s.service_mean_us;
  return d;
}

nb::dict ResultToDict(const ReplayResult& r) {
  nb::dict d;
  d["read"] = OpToDict(r.read);
  d["write"] = OpToDict(r.write);
  d["all"] = OpToDict(r.all);
  d["elapsed_s"] = r.elapsed_s;
  d["ops_per_s"] = r.ops_per_s;
  d["bytes_per_s"] = r.bytes_per_s;
  d["errors"] = r.errors;
  d["passes"] = r.passes;
  d["lag_p50_us"] = r.lag_p50_us;
  d["lag_p99_us"] = r.lag_p99_us;
  d["preloaded_keys"] = r.preloaded_keys;
  d["preload_s"] = r.preload_s;
  d["offered_ops_per_s"] = r.offered_ops_per_s;
  d["stopped"] = r.stopped;
  return d;
}

// The replay shares the middleware: closing it ends the replay (clients stop at
// their first Shutdown answer) but never frees what a client thread is calling.
std::shared_ptr<Middleware> RunningMiddleware(PyMiddleware& h) {
  if (!h.mw || !h.mw->running()) ThrowIfError(Status::Shutdown("replay: middleware is not running"));
  RefuseAfterFork(h.fork_generation, "replay", "middleware");
  return h.mw;
}

using RecordTuple = std::tuple<int64_t, std::string, std::string, uint64_t>;

// Freed by Python with the GIL held. The clients are joined with it released: a client
// waiting for a permit may be waiting for an async request whose completion needs it.
// Freed inside a completion callback of the middleware it was started on (the callback
// dropped the last reference), the core's destructor stops the clients and leaves
// joining them to a thread of its own (the exit hook waits for it). Freed in a child
// forked after it was made, it is left alone (leaked): its clients, and its
// middleware's threads, do not exist there.
struct PyReplay {
  PyReplay(const Trace& trace, const ReplayOptions& o) : replay(std::make_unique<Replay>(trace, o)) {}
  ~PyReplay() {
    if (fork_generation != ForkGeneration()) {
      (void)replay.release();
      // It may hold a middleware, whose box holds the engine's Python object: not a
      // reference counting error for nanobind to report at exit.
      nb::set_leak_warnings(false);
      return;
    }
    replay->Stop();
    if (std::shared_ptr<Middleware> mw = started_on.lock(); mw && mw->InCompletion()) return;
    ReplayResult ignored;
    if (ShouldReleaseGil()) {
      nb::gil_scoped_release release;
      (void)replay->Join(&ignored);
    } else {
      (void)replay->Join(&ignored);
    }
  }

  std::unique_ptr<Replay> replay;
  std::weak_ptr<Middleware> started_on;  // the middleware of the last start()
  const uint64_t fork_generation = ForkGeneration();
};

// A call that waits for the clients or the preload (start, join, run) would, inside one
// of the middleware's completion callbacks, wait for client threads that may wait for
// the permit of the thread running it.
void RefuseInsideCompletionOf(const PyReplay& r, const char* what) {
  RefuseAfterFork(r.fork_generation, what, "replay");
  if (std::shared_ptr<Middleware> mw = r.started_on.lock()) RefuseInsideCompletion(*mw, what);
}

// Start (preload included) on a helper thread; Ctrl-C stops the preload or the clients.
void StartInterruptibly(PyReplay& pr, std::shared_ptr<Middleware> mw) {
  RefuseInsideCompletion(*mw, "replay: start");
  RefuseInsideCompletionOf(pr, "replay: start");  // clients of the last run may still run
  pr.started_on = mw;
  Replay& r = *pr.replay;
  Status s = RunInterruptibly([&] { return r.Start(mw); }, [&] { r.Stop(); });
  ThrowIfError(s);
}

// Waits for the clients in slices; Ctrl-C stops them, joins them and raises.
nb::dict JoinInterruptibly(PyReplay& pr) {
  RefuseInsideCompletionOf(pr, "replay: join");
  Replay& r = *pr.replay;
  ReplayResult res;
  Status s;
  WaitInterruptibly([&] { return PollFor([&] { return !r.running(); }); },
                    [&] { r.Stop(); });
  {
    CallWithoutGil release;
    s = r.Join(&res);
  }
  ThrowIfError(s);
  return ResultToDict(res);
}

}  // namespace

void BindTrace(nb::module_& m) {
  m.attr("MAX_SCHEDULE_S") = kMaxScheduleS;  // refused past it by synth and replay
  nb::class_<Trace>(m, "Trace",
                    "A storage-access trace: records (time_us, op, key, bytes) sorted by time.")
      .def(nb::init<>())
      .def("__len__", [](const Trace& t) { return t.records.size(); })
      .def_prop_ro("origin_unix_ms", [](const Trace& t) { return t.origin_unix_ms; })
      .def_prop_ro("skipped_rows", [](const Trace& t) { return t.skipped_rows; })
      .def_prop_ro("first_skip_reason", [](const Trace& t) { return t.first_skip_reason; })
      .def(
          "records",
          [](const Trace& t) {
            std::vector<RecordTuple> out;
            out.reserve(t.records.size());
            for (const TraceRecord& r : t.records) {
              out.emplace_back(r.time_us, r.op == TraceOp::kRead ? "read" : "write", r.key, r.bytes);
            }
            return out;
          },
          "List of (time_us, 'read'|'write', key, bytes).")
      .def_static(
          "from_records",
          [](const std::vector<RecordTuple>& recs, int64_t origin_unix_ms) {
            Trace t;
            t.origin_unix_ms = origin_unix_ms;
            t.records.reserve(recs.size());
            for (const auto& [time_us, op, key, bytes] : recs) {
              if (key.empty()) Bad("trace: empty key");
              if (time_us < 0) Bad("trace: negative time_us");
              t.records.push_back({time_us, ToOp(op), key, bytes});
            }
            std::stable_sort(t.records.begin(), t.records.end(),
                             [](const TraceRecord& a, const TraceRecord& b) { return a.time_us < b.time_us; });
            return t;
          },
          nb::arg("records"), nb::arg("origin_unix_ms") = 0,
          "Build a trace from (time_us, op, key, bytes) tuples (sorted by time).")
      .def("summary", [](const Trace& t) { return SummaryToDict(SummarizeTrace(t)); })
      .def(
          "filter",
          [](const Trace& t, const nb::dict& d) {
            Trace out;
            ThrowIfError(FilterTrace(t, FilterFromDict(d), &out));
            return out;
          },
          nb::arg("options"), "New trace: time window, size range, record cap (dict of TraceFilter fields).")
      .def(
          "transform",
          [](const Trace& t, const nb::dict& d) {
            Trace out;
            ThrowIfError(TransformTrace(t, TransformFromDict(d), &out));
            return out;
          },
          nb::arg("options"), "New trace: fixed size, write ratio, key space, key prefix.")
      .def(
          "to_text",
          [](const Trace& t, const std::string& format, uint64_t seed, bool shuffle) {
            std::string out;
            ThrowIfError(FormatTrace(t, ToFormat(format), seed, shuffle, &out));
            return out;
          },
          nb::arg("format") = "native", nb::arg("seed") = 0, nb::arg("shuffle") = false)
      .def(
          "write",
          [](const Trace& t, const std::string& path, const std::string& format, uint64_t seed, bool shuffle) {
            CheckPath("path", path);
            Status s;
            TraceFormat f = ToFormat(format);
            {
              nb::gil_scoped_release release;
              s = WriteTrace(path, t, f, seed, shuffle);
            }
            ThrowIfError(s);
          },
          nb::arg("path"), nb::arg("format") = "native", nb::arg("seed") = 0, nb::arg("shuffle") = false);

  m.def(
      "read_trace",
      [](const std::string& path, const std::string& format, bool skip_malformed, nb::object start_unix_ms,
         nb::object end_unix_ms, uint64_t max_rows, uint64_t max_bytes) {
        CheckPath("path", path);
        TraceReadOptions o;
        o.format = ToFormat(format);
        o.skip_malformed = skip_malformed;
        if (!start_unix_ms.is_none()) o.start_unix_ms = OptionAs<int64_t>("read_trace: start_unix_ms", start_unix_ms);
        if (!end_unix_ms.is_none()) o.end_unix_ms = OptionAs<int64_t>("read_trace: end_unix_ms", end_unix_ms);
        o.max_rows = max_rows;
        o.max_bytes = max_bytes;
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;  // Ctrl-C stops a long read
        Trace t;
        Status s = RunInterruptibly([&] { return ReadTrace(path, o, &t); }, [&] { cancel.store(true); });
        ThrowIfError(s);
        return t;
      },
      nb::arg("path"), nb::arg("format") = "azure", nb::arg("skip_malformed") = false,
      nb::arg("start_unix_ms") = nb::none(), nb::arg("end_unix_ms") = nb::none(), nb::arg("max_rows") = 0,
      nb::arg("max_bytes") = 0,
      "Read an azure or native trace file; malformed rows raise (message names the line) or, "
      "with skip_malformed, are dropped and counted in Trace.skipped_rows. A row that is not "
      "UTF-8, or (max_bytes > 0) whose size is above max_bytes, is malformed.");
  m.def(
      "parse_trace",
      [](nb::handle content, const std::string& format, bool skip_malformed, const std::string& source_name,
         uint64_t max_bytes) {
        std::string text;  // bytes as they are (a file's content need not be UTF-8), or str
        if (nb::isinstance<nb::bytes>(content)) {
          nb::bytes b = nb::borrow<nb::bytes>(content);
          text.assign(b.c_str(), b.size());
        } else {
          text = OptionAs<std::string>("parse_trace: text", content);
        }
        TraceReadOptions o;
        o.format = ToFormat(format);
        o.skip_malformed = skip_malformed;
        o.source_name = source_name;
        o.max_bytes = max_bytes;
        Trace t;
        ThrowIfError(ParseTrace(text, o, &t));
        return t;
      },
      nb::arg("text"), nb::arg("format") = "azure", nb::arg("skip_malformed") = false,
      nb::arg("source_name") = "trace", nb::arg("max_bytes") = 0,
      "As read_trace, from a file's content (bytes or str).");
  m.def(
      "synth_azure",
      [](const nb::dict& d) {
        AzureSynthOptions o = AzureFromDict(d);
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;  // Ctrl-C stops a long synthesis
        Trace t;
        Status s = RunInterruptibly([&] { return SynthesizeAzure(o, &t); }, [&] { cancel.store(true); });
        ThrowIfError(s);
        return t;
      },
      nb::arg("options") = nb::dict(), "Azure-Functions-like trace (dict of AzureSynthOptions fields).");
  m.def(
      "synth_svd",
      [](const nb::dict& d) {
        SvdSynthOptions o = SvdFromDict(d);
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;  // Ctrl-C stops a long synthesis
        Trace t;
        Status s = RunInterruptibly([&] { return SynthesizeSvd(o, &t); }, [&] { cancel.store(true); });
        ThrowIfError(s);
        return t;
      },
      nb::arg("options") = nb::dict(), "Wukong-SVD-like trace (dict of SvdSynthOptions fields).");

  nb::class_<PyReplay>(m, "Replay",
                     "Open-loop trace replay through a Middleware (latency from the scheduled time).\n"
                     "In a completion callback of that middleware, start, join and run raise\n"
                     "NotSupportedError (they wait for the clients); stop() and the counters work.")
      .def(
          "__init__",
          [](PyReplay* self, const Trace& trace, const nb::dict& options) {
            new (self) PyReplay(trace, ReplayFromDict(options));
          },
          nb::arg("trace"), nb::arg("options") = nb::dict())
      .def(
          "start",
          [](PyReplay& r, PyMiddleware& h) { StartInterruptibly(r, RunningMiddleware(h)); },
          nb::arg("middleware"),
          "Preload (first time) and start the clients in the background. Ctrl-C during the\n"
          "preload stops it and raises KeyboardInterrupt.")
      .def("stop", [](PyReplay& r) { r.replay->Stop(); }, "Ask the clients to stop issuing (non-blocking).")
      .def(
          "join",
          [](PyReplay& r) { return JoinInterruptibly(r); },
          "Wait for the clients; returns the result dict. Ctrl-C stops the clients (requests\n"
          "in flight complete) and raises KeyboardInterrupt.")
      .def(
          "run",
          [](PyReplay& r, PyMiddleware& h) {
            StartInterruptibly(r, RunningMiddleware(h));
            return JoinInterruptibly(r);
          },
          nb::arg("middleware"), "Start + join (Ctrl-C as for start and join).")
      .def_prop_ro("running", [](const PyReplay& r) { return r.replay->running(); })
      .def_prop_ro("issued", [](const PyReplay& r) { return r.replay->issued(); })
      .def_prop_ro("completed", [](const PyReplay& r) { return r.replay->completed(); })
      .def_prop_ro("offered_ops_per_s", [](const PyReplay& r) { return r.replay->OfferedOpsPerSecond(); })
      .def("__len__", [](const PyReplay& r) { return r.replay->trace().records.size(); });
}

}  // namespace nvmw::py
