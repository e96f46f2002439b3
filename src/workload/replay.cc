// Serverless Trace Replay: open-loop client threads issuing trace records through
// the Middleware at their scheduled times; latency counted from the schedule.
#include "nvmw/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "middleware/deferred_stop.h"
#include "util/clock.h"
#include "util/histogram.h"
#include "util/rng.h"
#include "util/stop_signal.h"

namespace nvmw {

namespace {

// One per client thread, merged at Join, so the hot path never shares a cache line with
// another client (an idle client's histograms allocate nothing).
struct ClientStats {
  Histogram read, write;                // from the scheduled time
  Histogram read_service, write_service;  // from the issue time
  Histogram lag;                        // issue - scheduled
  uint64_t read_errors = 0, write_errors = 0, not_found = 0;
  uint64_t read_bytes = 0, write_bytes = 0;
  uint64_t max_pass = 0;
  int64_t last_done_ns = 0;
};

}  // namespace

struct Replay::Impl {
  Trace trace;
  ReplayOptions options;
  std::vector<int64_t> due_ns;  // per record, from Start, first pass
  int64_t period_ns = 0;        // loop period (span + one mean gap), after accel
  double offered_ops_per_s = 0;
  std::string value_buf;        // values are slices of this buffer

  bool preloaded = false;
  uint64_t preloaded_keys = 0;
  double preload_s = 0;

  std::mutex mu;                // serialises Start/Join
  std::vector<std::thread> clients;
  std::vector<ClientStats> stats;
  std::shared_ptr<Middleware> owner;  // set by Start(shared_ptr); kept until the next Start
  Middleware* mw = nullptr;
  // The middleware while clients may run (set by Start, cleared by Join once they are
  // joined), read without mu by Join and ~Replay to refuse waiting inside one of its
  // completions: Join holds mu while it waits.
  std::atomic<Middleware*> driving{nullptr};
  int64_t start_ns = 0;
  std::atomic<uint64_t> cursor{0};
  std::atomic<uint64_t> issued{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int> live{0};
  StopSignal stop;  // clients sleep on it until their next request is due
  std::atomic<bool> cut_short{false};
  bool started = false;

  // Refuses a record larger than the cap (options or the middleware's max_value_bytes),
  // then allocates the generated value content; the 4 KB tail lets writes take
  // shifted slices. Runs before any thread starts.
  Status PrepareValues(const Middleware& mw) {
    uint64_t cap = mw.options().max_value_bytes;
    if (options.max_value_bytes != 0) cap = std::min(cap, options.max_value_bytes);
    uint64_t max_bytes = 0;
    for (size_t i = 0; i < trace.records.size(); ++i) {
      const TraceRecord& r = trace.records[i];
      if (r.bytes > cap) {
        return Status::InvalidArgument("replay: record " + std::to_string(i + 1) + " (key '" + r.key + "') is " +
                                       std::to_string(r.bytes) + " bytes, over the size cap " +
                                       std::to_string(cap) + " (max_value_bytes)");
      }
      max_bytes = std::max(max_bytes, r.bytes);
    }
    if (value_buf.size() >= max_bytes + 4096) return Status::OK();
    try {
      value_buf.assign(max_bytes + 4096, '\0');
    } catch (const std::bad_alloc&) {
      return Status::NoSpace("replay: cannot allocate " + std::to_string(max_bytes + 4096) +
                             " bytes of value content");
    }
    Rng rng(options.seed);
    for (size_t i = 0; i < value_buf.size(); i += 8) {
      uint64_t x = rng.Next();
      std::memcpy(&value_buf[i], &x, std::min<size_t>(8, value_buf.size() - i));
    }
    return Status::OK();
  }

  Status Check() const {
    if (trace.records.empty()) return Status::InvalidArgument("replay: empty trace");
    if (options.threads < 1 || options.threads > 100000) {
      return Status::InvalidArgument("replay: threads must be in [1, 100000]");
    }
    if (!(options.accel > 0) || !std::isfinite(options.accel)) {
      return Status::InvalidArgument("replay: accel must be > 0");
    }
    if (!(options.duration_s >= 0 && options.duration_s <= kMaxScheduleS)) {
      return Status::InvalidArgument("replay: duration_s must be in [0, 1e9] s, got " +
                                     std::to_string(options.duration_s));
    }
    // The loop period, as the constructor computes it in int64 nanoseconds.
    const auto& recs = trace.records;
    const double span_s =
        static_cast<double>(recs.back().time_us - recs.front().time_us) / 1e6 / options.accel;
    const double gap_s = recs.size() > 1 && span_s > 0 ? span_s / static_cast<double>(recs.size() - 1)
                                                       : 1.0 / options.accel;
    if (!(span_s + gap_s <= kMaxScheduleS)) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "replay: at accel %g the trace's schedule spans %g s, more than the 1e9 s a "
                    "replay can schedule",
                    options.accel, span_s + gap_s);
      return Status::InvalidArgument(text);
    }
    if (options.preload_threads < 1) return Status::InvalidArgument("replay: preload_threads must be >= 1");
    return Status::OK();
  }

  Status Preload() {
    // Every key the replay reads gets written once, with the size of its first read.
    std::unordered_map<std::string_view, uint64_t> sizes;
    std::vector<std::pair<std::string_view, uint64_t>> keys;
    for (const TraceRecord& r : trace.records) {
      if (r.op != TraceOp::kRead) continue;
      if (sizes.emplace(r.key, r.bytes).second) keys.emplace_back(r.key, r.bytes);
    }
    int64_t t0 = NowNs();
    std::atomic<size_t> next{0};
    std::mutex err_mu;
    Status first_error;
    auto worker = [&] {
      while (!stop.stopped()) {
        size_t i = next.fetch_add(1);
        if (i >= keys.size()) return;
        std::string_view value(value_buf.data(), keys[i].second);
        Status s = mw->Put(keys[i].first, value, options.cls);
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(err_mu);
          if (first_error.ok()) {
            first_error = Status::InvalidArgument("replay preload of key '" + std::string(keys[i].first) +
                                                  "' failed: " + s.ToString());
          }
          next.store(keys.size());
          return;
        }
      }
    };
    int n = std::min<int>(options.preload_threads, static_cast<int>(std::max<size_t>(1, keys.size())));
    std::vector<std::thread> pool;
    try {
      for (int t = 1; t < n; ++t) pool.emplace_back(worker);
    } catch (const std::system_error&) {
      // Fewer loader threads than asked: the ones started and this one do the work.
    }
    worker();
    for (auto& t : pool) t.join();
    if (!first_error.ok()) return first_error;
    if (stop.stopped()) return Status::Shutdown("replay: stopped during the preload");
    preloaded = true;
    preloaded_keys = keys.size();
    preload_s = static_cast<double>(NowNs() - t0) / 1e9;
    return Status::OK();
  }

  // NotSupported when the calling thread runs a completion of `target`: `what` waits
  // for clients that may wait for the permit that thread holds.
  static Status RefuseInsideCompletion(const Middleware* target, const char* what) {
    if (target == nullptr || !target->InCompletion()) return Status::OK();
    return Status::NotSupported(
        std::string("replay: ") + what +
        " called from a completion of the middleware the replay drives: it would wait for "
        "client threads that may wait for the permit of the thread running the completion");
  }

  void JoinClients() {
    std::lock_guard<std::mutex> l(mu);
    for (auto& t : clients) t.join();
    clients.clear();
  }

  void Client(ClientStats* st) {
    const uint64_t n = trace.records.size();
    const int64_t end_ns = options.duration_s > 0
                               ? start_ns + static_cast<int64_t>(options.duration_s * 1e9)
                               : INT64_MAX;
    std::string value_out;
    while (!stop.stopped()) {
      uint64_t i = cursor.fetch_add(1, std::memory_order_relaxed);
      uint64_t pass = i / n;
      if (pass > 0 && !options.loop) break;
      const TraceRecord& r = trace.records[i % n];
      int64_t due = start_ns + static_cast<int64_t>(pass) * period_ns + due_ns[i % n];
      if (due >= end_ns) {
        cut_short.store(true, std::memory_order_relaxed);
        break;
      }
      if (!stop.SleepUntil(due)) break;
      int64_t issue = NowNs();
      if (issue >= end_ns) {  // fell so far behind that the run is over
        cut_short.store(true, std::memory_order_relaxed);
        break;
      }
      issued.fetch_add(1, std::memory_order_relaxed);
      Status s;
      if (r.op == TraceOp::kRead) {
        s = mw->Get(r.key, &value_out, options.cls);
      } else {
        // Shift the slice a little per record so consecutive values differ.
        size_t off = static_cast<size_t>((i * 64) % 4096);
        s = mw->Put(r.key, std::string_view(value_buf.data() + off, r.bytes), options.cls);
      }
      int64_t done = NowNs();
      completed.fetch_add(1, std::memory_order_relaxed);
      // A stopped middleware will refuse everything that follows: end the replay
      // rather than keep issuing (possibly forever, when looping) into a closed store.
      if (s.IsShutdown()) stop.Set();
      uint64_t lat = static_cast<uint64_t>(std::max<int64_t>(0, done - due));
      uint64_t svc = static_cast<uint64_t>(std::max<int64_t>(0, done - issue));
      st->lag.Record(static_cast<uint64_t>(std::max<int64_t>(0, issue - due)));
      st->max_pass = std::max(st->max_pass, pass);
      st->last_done_ns = done;
      if (r.op == TraceOp::kRead) {
        st->read.Record(lat);
        st->read_service.Record(svc);
        if (s.ok()) {
          st->read_bytes += value_out.size();
        } else if (s.IsNotFound()) {
          ++st->not_found;
        } else {
          ++st->read_errors;
        }
      } else {
        st->write.Record(lat);
        st->write_service.Record(svc);
        if (s.ok()) {
          st->write_bytes += r.bytes;
        } else {
          ++st->write_errors;
        }
      }
    }
    live.fetch_sub(1, std::memory_order_acq_rel);
  }
};

namespace {

constexpr double kNsPerUs = 1e3;

void Fill(const Histogram& lat, const Histogram& svc, ReplayOpStats* out) {
  out->ops = lat.count();
  out->p50_us = lat.Percentile(50) / kNsPerUs;
  out->p99_us = lat.Percentile(99) / kNsPerUs;
  out->p999_us = lat.Percentile(99.9) / kNsPerUs;
  out->mean_us = lat.Mean() / kNsPerUs;
  out->max_us = static_cast<double>(lat.max()) / kNsPerUs;
  out->service_p50_us = svc.Percentile(50) / kNsPerUs;
  out->service_p99_us = svc.Percentile(99) / kNsPerUs;
  out->service_mean_us = svc.Mean() / kNsPerUs;
}

}  // namespace

Replay::Replay(Trace trace, const ReplayOptions& options) : impl_(new Impl) {
  Impl& m = *impl_;
  m.trace = std::move(trace);
  m.options = options;
  const auto& recs = m.trace.records;
  if (recs.empty()) return;
  double accel = options.accel > 0 ? options.accel : 1.0;
  int64_t first = recs.front().time_us;
  m.due_ns.reserve(recs.size());
  for (const TraceRecord& r : recs) {
    m.due_ns.push_back(std::llround(static_cast<double>(r.time_us - first) * 1000.0 / accel));
  }
  int64_t span = m.due_ns.back();
  // One mean gap closes the loop so the last and first records do not collide;
  // a single-record (or zero-span) trace repeats once per second of trace time.
  int64_t gap = recs.size() > 1 && span > 0 ? span / static_cast<int64_t>(recs.size() - 1)
                                            : std::llround(1e9 / accel);
  m.period_ns = span + std::max<int64_t>(gap, 1);
  m.offered_ops_per_s = static_cast<double>(recs.size()) / (static_cast<double>(m.period_ns) / 1e9);
  // The value buffer is allocated by Start, once the sizes are checked against the caps.
}

Replay::~Replay() {
  Stop();
  Middleware* driving = impl_->driving.load(std::memory_order_acquire);
  if (driving != nullptr && driving->InCompletion()) {
    // A client may be waiting for the permit this thread holds until the completion
    // returns: the clients, told to stop, are joined (and the replay freed, with its
    // reference to the middleware) on a thread of their own.
    Impl* impl = impl_.release();
    if (!RunDeferredStop([impl] {
          impl->JoinClients();
          delete impl;
        })) {
      std::fprintf(stderr,
                   "nvmw: cannot start a thread to free a replay inside a completion; leaking it\n");
    }
    return;
  }
  ReplayResult ignored;
  Join(&ignored);
}

Status Replay::Start(std::shared_ptr<Middleware> mw) {
  // The caller's reference keeps the middleware alive until it is handed over.
  Status s = Start(mw.get());
  if (s.ok()) {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->owner = std::move(mw);
  }
  return s;
}

Status Replay::Start(Middleware* mw) {
  Impl& m = *impl_;
  // Before the lock: a Join elsewhere holds it while it waits for the clients.
  Status s = Impl::RefuseInsideCompletion(mw, "Start");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(m.mu);
  if (m.started) return Status::InvalidArgument("replay: already started (Join it first)");
  if (mw == nullptr) return Status::InvalidArgument("replay: null middleware");
  s = m.Check();
  if (!s.ok()) return s;
  s = m.PrepareValues(*mw);
  if (!s.ok()) return s;
  m.owner.reset();  // a raw pointer is not owned
  m.mw = mw;
  m.stop.Reset();
  if (m.options.preload && !m.preloaded) {
    s = m.Preload();
    if (!s.ok()) return s;
  }
  m.cursor.store(0);
  m.issued.store(0);
  m.completed.store(0);
  m.cut_short.store(false);
  m.stats.clear();
  m.stats.resize(static_cast<size_t>(m.options.threads));
  m.live.store(m.options.threads);
  // Start a little in the future so the first records are not late merely because
  // the client threads are still being created.
  m.start_ns = NowNs() + 2'000'000 + 20'000 * static_cast<int64_t>(m.options.threads);
  m.clients.reserve(m.stats.size());
  try {
    for (size_t t = 0; t < m.stats.size(); ++t) {
      m.clients.emplace_back([&m, st = &m.stats[t]] { m.Client(st); });
    }
  } catch (const std::system_error& e) {
    // Could not start every client: stop and join the ones that started, report it.
    size_t started = m.clients.size();
    m.stop.Set();
    for (auto& t : m.clients) t.join();
    m.clients.clear();
    m.live.store(0);  // the clients never started count as finished (running() is false)
    return Status::IOError("replay: could not start client thread " + std::to_string(started + 1) + " of " +
                           std::to_string(m.stats.size()) + " (" + e.what() + ")");
  }
  m.started = true;
  m.driving.store(mw, std::memory_order_release);
  return Status::OK();
}

void Replay::Stop() { impl_->stop.Set(); }

Status Replay::Join(ReplayResult* result) {
  Impl& m = *impl_;
  Status s = Impl::RefuseInsideCompletion(m.driving.load(std::memory_order_acquire), "Join");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(m.mu);
  if (!m.started) {
    *result = ReplayResult();
    return Status::OK();
  }
  for (auto& t : m.clients) t.join();
  m.clients.clear();
  m.driving.store(nullptr, std::memory_order_release);
  m.started = false;
  Histogram read, write, all, read_svc, write_svc, all_svc, lag;
  ReplayResult r;
  int64_t last_done = m.start_ns;
  uint64_t max_pass = 0;
  bool any = false;
  for (const ClientStats& st : m.stats) {
    read.Merge(st.read);
    write.Merge(st.write);
    read_svc.Merge(st.read_service);
    write_svc.Merge(st.write_service);
    lag.Merge(st.lag);
    r.read.errors += st.read_errors;
    r.write.errors += st.write_errors;
    r.read.not_found += st.not_found;
    r.read.bytes += st.read_bytes;
    r.write.bytes += st.write_bytes;
    if (st.last_done_ns != 0) {
      any = true;
      last_done = std::max(last_done, st.last_done_ns);
      max_pass = std::max(max_pass, st.max_pass);
    }
  }
  all.Merge(read);
  all.Merge(write);
  all_svc.Merge(read_svc);
  all_svc.Merge(write_svc);
  Fill(read, read_svc, &r.read);
  Fill(write, write_svc, &r.write);
  Fill(all, all_svc, &r.all);
  r.all.errors = r.read.errors + r.write.errors;
  r.all.not_found = r.read.not_found;
  r.all.bytes = r.read.bytes + r.write.bytes;
  r.errors = r.all.errors;
  r.elapsed_s = std::max(0.0, static_cast<double>(last_done - m.start_ns) / 1e9);
  if (r.elapsed_s > 0) {
    r.ops_per_s = static_cast<double>(r.all.ops) / r.elapsed_s;
    r.bytes_per_s = static_cast<double>(r.all.bytes) / r.elapsed_s;
  }
  r.passes = any ? max_pass + 1 : 0;
  r.lag_p50_us = lag.Percentile(50) / kNsPerUs;
  r.lag_p99_us = lag.Percentile(99) / kNsPerUs;
  r.preloaded_keys = m.preloaded_keys;
  r.preload_s = m.preload_s;
  r.offered_ops_per_s = m.offered_ops_per_s;
  r.stopped = m.stop.stopped() || m.cut_short.load();
  *result = r;
  return Status::OK();
}

Status Replay::Run(Middleware* mw, ReplayResult* result) {
  Status s = Start(mw);
  if (!s.ok()) return s;
  return Join(result);
}

Status Replay::Run(std::shared_ptr<Middleware> mw, ReplayResult* result) {
  Status s = Start(std::move(mw));
  if (!s.ok()) return s;
  return Join(result);
}

bool Replay::running() const { return impl_->live.load(std::memory_order_acquire) > 0; }
uint64_t Replay::issued() const { return impl_->issued.load(std::memory_order_relaxed); }
uint64_t Replay::completed() const { return impl_->completed.load(std::memory_order_relaxed); }
double Replay::OfferedOpsPerSecond() const { return impl_->offered_ops_per_s; }
const Trace& Replay::trace() const { return impl_->trace; }
const ReplayOptions& Replay::options() const { return impl_->options; }

}  // namespace nvmw
