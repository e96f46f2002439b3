// YCSB-style closed-loop generator: load phase, client threads, pacing and the
// client-side latency statistics (see include/nvmw/ycsb.h).
#include "nvmw/ycsb.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

#include <pthread.h>

#include "middleware/deferred_stop.h"
#include "util/histogram.h"
#include "util/rng.h"
#include "util/stop_signal.h"
#include "workload/ycsb_generators.h"

namespace nvmw {

using Clock = std::chrono::steady_clock;

Status ParseKeyDistribution(std::string_view name, KeyDistribution* out) {
  if (name == "uniform") *out = KeyDistribution::kUniform;
  else if (name == "zipfian") *out = KeyDistribution::kZipfian;
  else if (name == "latest") *out = KeyDistribution::kLatest;
  else return Status::InvalidArgument("distribution must be uniform, zipfian or latest, not '" +
                                      std::string(name) + "'");
  return Status::OK();
}

const char* KeyDistributionName(KeyDistribution d) {
  switch (d) {
    case KeyDistribution::kUniform: return "uniform";
    case KeyDistribution::kZipfian: return "zipfian";
    case KeyDistribution::kLatest: return "latest";
  }
  return "unknown";
}

Status ParseRequestClass(std::string_view name, RequestClass* out) {
  if (name == "interactive") *out = RequestClass::kInteractive;
  else if (name == "batch") *out = RequestClass::kBatch;
  else if (name == "auto") *out = RequestClass::kAuto;
  else return Status::InvalidArgument("class must be interactive, batch or auto, not '" +
                                      std::string(name) + "'");
  return Status::OK();
}

namespace {

// Longest gap between one paced thread's requests (1e13 ns): staggering 100,000
// threads' schedules by that much still fits in int64 nanoseconds.
constexpr double kMaxPaceGapNs = 1e13;

enum OpKind { kRead = 0, kUpdate = 1, kInsert = 2, kNumKinds = 3 };

// What one client thread measured; merged after Join (never shared while running).
struct ThreadStats {
  Histogram hist[kNumKinds];
  uint64_t errors[kNumKinds] = {0, 0, 0};
  uint64_t not_found = 0;
  std::vector<Histogram> intervals;  // per interval_s of the run (empty ones allocate nothing)
  Clock::time_point end;
  std::string first_error;
};

// Picks the record number of a read or update among the keys inserted so far.
class KeyChooser {
 public:
  KeyChooser(const YcsbOptions& o, uint64_t key_space)
      : dist_(o.distribution),
        scrambled_(key_space, o.zipfian_constant),
        latest_(std::max<uint64_t>(o.record_count, 1), o.zipfian_constant) {}

  uint64_t Next(Rng* rng, uint64_t inserted) {
    switch (dist_) {
      case KeyDistribution::kUniform:
        return rng->Below(inserted);
      case KeyDistribution::kLatest:
        return latest_.Next(rng, inserted);
      case KeyDistribution::kZipfian:
        break;
    }
    // The scrambled space is fixed for the whole run (record_count plus the inserts
    // expected), so hot keys stay hot as keys are added; draws past the keys inserted
    // so far are redrawn, as YCSB does.
    for (int attempt = 0; attempt < 32; ++attempt) {
      const uint64_t k = scrambled_.Next(rng);
      if (k < inserted) return k;
    }
    return scrambled_.Next(rng) % inserted;
  }

 private:
  KeyDistribution dist_;
  ycsb::ScrambledZipfianGenerator scrambled_;
  ycsb::SkewedLatestGenerator latest_;
};

void FillOpStats(const Histogram& h, uint64_t errors, double elapsed_s, YcsbOpStats* s) {
  s->ops = h.count();
  s->errors = errors;
  s->ops_per_s = elapsed_s > 0 ? h.count() / elapsed_s : 0;
  s->mean_us = h.Mean() / 1e3;
  s->min_us = h.min() / 1e3;
  s->max_us = h.max() / 1e3;
  s->p50_us = h.Percentile(50) / 1e3;
  s->p99_us = h.Percentile(99) / 1e3;
  s->p999_us = h.Percentile(99.9) / 1e3;
}

}  // namespace

struct YcsbGenerator::Impl {
  YcsbOptions opt;
  std::shared_ptr<Middleware> owner;  // set when the generator shares the middleware
  Middleware* mw = nullptr;
  Engine* db = nullptr;

  StopSignal stop;  // paced clients sleep on it until their next request is due
  std::atomic<uint64_t> next_op{0};      // operations claimed (operation_count limit)
  std::atomic<uint64_t> next_insert{0};  // record number of the next insert
  std::atomic<uint64_t> inserted{0};     // keys reads/updates may pick: [0, inserted)
  std::atomic<int> live_clients{0};
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<ThreadStats>> stats;
  // Load, Start, Join and Results may be called from several threads: mu serialises
  // them (Stop never takes it, so it can end a Load or a run in progress).
  mutable std::mutex mu;
  std::atomic<bool> started{false};  // read by running() without mu
  bool joined = false;
  Clock::time_point run_start, deadline;
  bool has_deadline = false;
  uint64_t key_space = 0;

  uint64_t records_loaded = 0;
  double load_s = 0;
  std::string load_error;

  Status Read(std::string_view key, std::string* buf) {
    return mw ? mw->Get(key, buf, opt.request_class) : db->Get(key, buf);
  }
  Status Write(std::string_view key, std::string_view value) {
    return mw ? mw->Put(key, value, opt.request_class) : db->Put(key, value);
  }

  void Client(int t);
  void Sleep(Clock::time_point until);
  void JoinClients();
  // NotSupported when the calling thread runs a completion of the middleware the
  // generator drives: `what` waits for the clients (or for a call that does), and a
  // client may be waiting for the permit that thread holds.
  Status RefuseInsideCompletion(const char* what) const;
};

void YcsbGenerator::Impl::JoinClients() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& th : threads) {
    if (th.joinable()) th.join();
  }
  if (started) joined = true;
}

Status YcsbGenerator::Impl::RefuseInsideCompletion(const char* what) const {
  if (mw == nullptr || !mw->InCompletion()) return Status::OK();
  return Status::NotSupported(
      std::string("ycsb: ") + what +
      " called from a completion of the middleware the generator drives: it would wait for "
      "client threads that may wait for the permit of the thread running the completion");
}

// Sleeps until `until` or Stop(), whichever comes first.
void YcsbGenerator::Impl::Sleep(Clock::time_point until) {
  stop.SleepUntil(
      std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count());
}

void YcsbGenerator::Impl::Client(int t) {
  // Named for per-thread CPU and scheduling accounting (top -H, /proc/PID/task/TID/comm,
  // schedstat), like the middleware's own threads.
  (void)::pthread_setname_np(::pthread_self(),
                             !mw                                           ? "ycsb-direct"
                             : opt.request_class == RequestClass::kBatch ? "ycsb-batch"
                                                                          : "ycsb-inter");
  ThreadStats& st = *stats[t];
  Rng rng(opt.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(t) + 1);
  KeyChooser chooser(opt, key_space);
  std::string value(opt.value_bytes, '\0');
  for (char& c : value) c = static_cast<char>('a' + rng.Below(26));
  std::string key, read_buf;

  const double read_p = opt.read_proportion;
  const double update_p = read_p + opt.update_proportion;
  const bool paced = opt.target_ops_per_s > 0;
  const auto period = std::chrono::nanoseconds(
      paced ? std::llround(1e9 * opt.threads / opt.target_ops_per_s) : 0);
  // Stagger the clients' schedules so paced requests do not arrive in bursts.
  auto due = run_start + period * t / opt.threads;
  const double interval_ns = opt.interval_s * 1e9;

  while (!stop.stopped()) {
    if (opt.operation_count > 0 &&
        next_op.fetch_add(1, std::memory_order_relaxed) >= opt.operation_count) {
      break;
    }
    Clock::time_point begin = Clock::now();
    if (paced) {
      // Past the deadline by the schedule or by the clock: a client that falls behind a
      // pace faster than it can issue would otherwise run until its schedule (which
      // advances one period per request) reached the deadline, or never with a period
      // that rounds to 0 ns.
      if (has_deadline && (due >= deadline || begin >= deadline)) break;
      if (due > begin) Sleep(due);
      if (stop.stopped()) break;
      begin = due;  // latency from the scheduled start (coordinated omission)
      due += period;
    } else if (has_deadline && begin >= deadline) {
      break;
    }

    const double u = rng.NextDouble();
    const OpKind kind = u < read_p ? kRead : (u < update_p ? kUpdate : kInsert);
    Status s;
    if (kind == kInsert) {
      const uint64_t keynum = next_insert.fetch_add(1, std::memory_order_relaxed);
      ycsb::BuildKey(keynum, &key);
      s = Write(key, value);
      if (s.ok()) inserted.fetch_add(1, std::memory_order_release);
    } else {
      const uint64_t n = inserted.load(std::memory_order_acquire);
      ycsb::BuildKey(chooser.Next(&rng, n), &key);
      s = kind == kRead ? Read(key, &read_buf) : Write(key, value);
    }
    const auto end = Clock::now();
    const uint64_t ns = static_cast<uint64_t>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count()));
    st.hist[kind].Record(ns);
    if (s.IsNotFound()) {
      ++st.not_found;
    } else if (!s.ok()) {
      ++st.errors[kind];
      if (st.first_error.empty()) st.first_error = s.ToString();
      // A stopped middleware answers every later call the same way: end this client
      // instead of spinning through the rest of the run.
      if (s.IsShutdown()) break;
    }
    if (interval_ns > 0) {
      const double since = std::chrono::duration<double, std::nano>(end - run_start).count();
      const size_t idx = static_cast<size_t>(std::max(0.0, since) / interval_ns);
      if (idx >= st.intervals.size()) st.intervals.resize(idx + 1);
      st.intervals[idx].Record(ns);
    }
  }
  st.end = Clock::now();
  live_clients.fetch_sub(1, std::memory_order_release);
}

YcsbGenerator::YcsbGenerator(const YcsbOptions& options, Middleware* middleware)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  impl_->mw = middleware;
}

YcsbGenerator::YcsbGenerator(const YcsbOptions& options, std::shared_ptr<Middleware> middleware)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  impl_->mw = middleware.get();
  impl_->owner = std::move(middleware);
}

YcsbGenerator::YcsbGenerator(const YcsbOptions& options, Engine* engine)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  impl_->db = engine;
}

YcsbGenerator::~YcsbGenerator() {
  Stop();
  if (impl_->mw != nullptr && impl_->mw->InCompletion()) {
    // A client may be waiting for the permit this thread holds until the completion
    // returns: the clients, told to stop, are joined (and the generator freed, with
    // its reference to the middleware) on a thread of their own.
    Impl* impl = impl_.release();
    if (!RunDeferredStop([impl] {
          impl->JoinClients();
          delete impl;
        })) {
      std::fprintf(stderr,
                   "nvmw: cannot start a thread to free a YCSB generator inside a completion; "
                   "leaking it\n");
    }
    return;
  }
  impl_->JoinClients();
}

Status YcsbGenerator::Validate(const YcsbOptions& o) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("ycsb: " + m); };
  if (o.threads < 1 || o.threads > 100000) return bad("threads must be in [1, 100000]");
  if (o.load_threads < 0 || o.load_threads > 100000) return bad("load_threads must be in [0, 100000]");
  const double props[] = {o.read_proportion, o.update_proportion, o.insert_proportion};
  for (double p : props) {
    if (!(p >= 0 && p <= 1)) return bad("each proportion must be in [0, 1]");
  }
  const double sum = props[0] + props[1] + props[2];
  if (std::abs(sum - 1) > 1e-6) {
    return bad("read + update + insert proportions must sum to 1 (got " + std::to_string(sum) + ")");
  }
  if (o.record_count == 0 && props[0] + props[1] > 0) {
    return bad("reads and updates need record_count >= 1");
  }
  if (!(o.duration_s >= 0) || !std::isfinite(o.duration_s)) return bad("duration_s must be >= 0");
  if (o.operation_count == 0 && o.duration_s == 0) {
    return bad("set operation_count or duration_s (or both)");
  }
  if (!(o.target_ops_per_s >= 0) || !std::isfinite(o.target_ops_per_s)) {
    return bad("target_ops_per_s must be >= 0");
  }
  // Each paced thread waits threads / rate between its requests, counted in int64
  // nanoseconds and staggered by up to `threads` such gaps: past kMaxPaceGapNs (about
  // 2.8 hours) that arithmetic could overflow and the run would never end.
  if (o.target_ops_per_s > 0 && 1e9 * o.threads / o.target_ops_per_s > kMaxPaceGapNs) {
    char slowest[32];
    std::snprintf(slowest, sizeof slowest, "%.2g", 1e9 * o.threads / kMaxPaceGapNs);
    return bad("target_ops_per_s " + std::to_string(o.target_ops_per_s) + " is too slow to pace " +
               std::to_string(o.threads) + " threads: use 0 (unpaced) or at least " + slowest);
  }
  if (!(o.interval_s >= 0) || !std::isfinite(o.interval_s)) return bad("interval_s must be >= 0");
  if (o.interval_s > 0 && o.interval_s < 1e-3) return bad("interval_s must be >= 0.001");
  if (!(o.zipfian_constant > 0 && o.zipfian_constant < 1)) {
    return bad("zipfian_constant must be in (0, 1)");
  }
  if (o.request_class != RequestClass::kInteractive && o.request_class != RequestClass::kBatch &&
      o.request_class != RequestClass::kAuto) {
    return bad("unknown request class");
  }
  if (o.distribution != KeyDistribution::kUniform && o.distribution != KeyDistribution::kZipfian &&
      o.distribution != KeyDistribution::kLatest) {
    return bad("unknown distribution");
  }
  return Status::OK();
}

Status YcsbGenerator::Load() {
  Impl& m = *impl_;
  Status s = Validate(m.opt);
  if (!s.ok()) return s;
  s = m.RefuseInsideCompletion("Load");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.started) return Status::NotSupported("ycsb: Load after Start");
  const int n_threads = static_cast<int>(std::min<uint64_t>(
      std::max<uint64_t>(m.opt.record_count, 1), m.opt.load_threads > 0 ? m.opt.load_threads : m.opt.threads));
  std::atomic<uint64_t> loaded{0};
  std::mutex err_mu;
  std::string first_error;
  const auto t0 = Clock::now();
  std::vector<std::thread> loaders;
  loaders.reserve(static_cast<size_t>(n_threads));
  std::string thread_error;
  try {
    for (int t = 0; t < n_threads; ++t) {
      loaders.emplace_back([&, t] {
        Rng rng(m.opt.seed ^ (0x5851f42d4c957f2dull * (t + 1)));
        std::string value(m.opt.value_bytes, '\0');
        for (char& c : value) c = static_cast<char>('a' + rng.Below(26));
        std::string key;
        const uint64_t lo = m.opt.record_count * t / n_threads;
        const uint64_t hi = m.opt.record_count * (t + 1) / n_threads;
        uint64_t ok = 0;
        for (uint64_t k = lo; k < hi && !m.stop.stopped(); ++k) {
          ycsb::BuildKey(k, &key);
          Status ps = m.Write(key, value);
          if (ps.ok()) {
            ++ok;
          } else {
            std::lock_guard<std::mutex> lock(err_mu);
            if (first_error.empty()) first_error = "ycsb load of record " + std::to_string(k) + ": " + ps.ToString();
            if (ps.IsShutdown()) break;  // a stopped middleware refuses the rest too
          }
        }
        loaded.fetch_add(ok);
      });
    }
  } catch (const std::system_error& e) {
    // The operating system refused a thread: stop the loaders already running and
    // report it (std::thread's exception must not escape: it would terminate).
    thread_error = "ycsb: could not start load thread " + std::to_string(loaders.size() + 1) + " of " +
                   std::to_string(n_threads) + " (" + e.what() + ")";
    m.stop.Set();
  }
  for (auto& th : loaders) th.join();
  m.load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  m.records_loaded += loaded.load();
  if (!thread_error.empty()) {
    m.load_error = thread_error;
    return Status::IOError(thread_error);
  }
  if (!first_error.empty()) {
    m.load_error = first_error;
    return Status::IOError(first_error);
  }
  return Status::OK();
}

Status YcsbGenerator::Start() {
  Impl& m = *impl_;
  Status s = Validate(m.opt);
  if (!s.ok()) return s;
  s = m.RefuseInsideCompletion("Start");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.started) return Status::NotSupported("ycsb: a generator runs once; make a new one");
  if (m.mw != nullptr && !m.mw->running()) return Status::Shutdown("ycsb: middleware is not running");
  m.started = true;
  m.next_insert.store(m.opt.record_count);
  m.inserted.store(m.opt.record_count);
  uint64_t expected_inserts = 0;
  if (m.opt.insert_proportion > 0) {
    expected_inserts = m.opt.operation_count > 0
        ? static_cast<uint64_t>(std::ceil(m.opt.operation_count * m.opt.insert_proportion))
        : m.opt.record_count;  // duration-bound: assume the store at most doubles
  }
  m.key_space = std::max<uint64_t>(1, m.opt.record_count + expected_inserts);
  for (int t = 0; t < m.opt.threads; ++t) m.stats.push_back(std::make_unique<ThreadStats>());
  m.run_start = Clock::now();
  m.has_deadline = m.opt.duration_s > 0;
  if (m.has_deadline) {
    m.deadline = m.run_start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(m.opt.duration_s));
  }
  m.live_clients.store(m.opt.threads);
  m.threads.reserve(static_cast<size_t>(m.opt.threads));
  try {
    for (int t = 0; t < m.opt.threads; ++t) {
      m.threads.emplace_back([&m, t] { m.Client(t); });
    }
  } catch (const std::system_error& e) {
    // The operating system refused a client thread: stop and join the clients already
    // running, and report it instead of letting std::thread's exception terminate.
    const int started = static_cast<int>(m.threads.size());
    m.stop.Set();
    m.live_clients.fetch_sub(m.opt.threads - started, std::memory_order_release);
    for (int t = started; t < m.opt.threads; ++t) m.stats[t]->end = m.run_start;
    for (auto& th : m.threads) th.join();
    m.joined = true;
    return Status::IOError("ycsb: could not start client thread " + std::to_string(started + 1) + " of " +
                           std::to_string(m.opt.threads) + " (" + e.what() + ")");
  }
  return Status::OK();
}

void YcsbGenerator::Stop() { impl_->stop.Set(); }

Status YcsbGenerator::Join() {
  Status s = impl_->RefuseInsideCompletion("Join");
  if (!s.ok()) return s;
  impl_->JoinClients();
  return Status::OK();
}

bool YcsbGenerator::running() const {
  return impl_->started && impl_->live_clients.load(std::memory_order_acquire) > 0;
}

Status YcsbGenerator::Results(YcsbResults* r) const {
  const Impl& m = *impl_;
  Status s = m.RefuseInsideCompletion("Results");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(m.mu);
  *r = YcsbResults();
  r->records_loaded = m.records_loaded;
  r->load_s = m.load_s;
  r->first_error = m.load_error;
  if (!m.started) return Status::OK();
  if (!m.joined) return Status::NotSupported("ycsb: Results before Join");

  Clock::time_point last_end = m.run_start;
  Histogram total, per_kind[kNumKinds];
  uint64_t errors[kNumKinds] = {0, 0, 0}, not_found = 0;
  std::vector<Histogram> intervals;
  for (const auto& st : m.stats) {
    last_end = std::max(last_end, st->end);
    for (int k = 0; k < kNumKinds; ++k) {
      per_kind[k].Merge(st->hist[k]);
      total.Merge(st->hist[k]);
      errors[k] += st->errors[k];
    }
    not_found += st->not_found;
    if (st->intervals.size() > intervals.size()) intervals.resize(st->intervals.size());
    for (size_t i = 0; i < st->intervals.size(); ++i) {
      intervals[i].Merge(st->intervals[i]);
    }
    if (r->first_error.empty()) r->first_error = st->first_error;
  }
  r->elapsed_s = std::chrono::duration<double>(last_end - m.run_start).count();
  FillOpStats(total, errors[0] + errors[1] + errors[2], r->elapsed_s, &r->all);
  FillOpStats(per_kind[kRead], errors[kRead], r->elapsed_s, &r->read);
  FillOpStats(per_kind[kUpdate], errors[kUpdate], r->elapsed_s, &r->update);
  FillOpStats(per_kind[kInsert], errors[kInsert], r->elapsed_s, &r->insert);
  r->read.not_found = r->all.not_found = not_found;
  for (size_t i = 0; i < intervals.size(); ++i) {
    YcsbInterval iv;
    iv.start_s = i * m.opt.interval_s;
    // The last interval is usually cut short by the end of the run.
    const double len = std::min(m.opt.interval_s, r->elapsed_s - iv.start_s);
    iv.ops = intervals[i].count();
    iv.ops_per_s = len > 0 ? iv.ops / len : 0;
    iv.p50_us = intervals[i].Percentile(50) / 1e3;
    iv.p99_us = intervals[i].Percentile(99) / 1e3;
    iv.mean_us = intervals[i].Mean() / 1e3;
    r->intervals.push_back(iv);
  }
  return Status::OK();
}

Status YcsbGenerator::Run(YcsbResults* results) {
  Status s = Start();  // refused inside a completion of the middleware, as Join is
  if (!s.ok()) return s;
  Join();
  return Results(results);
}

namespace {

// Start + Join + Results, with `cancel` (if given) polled while the clients run:
// once it reads true the clients are asked to stop.
Status RunCancellable(YcsbGenerator* gen, const std::atomic<bool>* cancel, YcsbResults* results) {
  Status s = gen->Start();
  if (!s.ok()) return s;
  if (cancel != nullptr) {
    while (gen->running()) {
      if (cancel->load(std::memory_order_relaxed)) gen->Stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  gen->Join();
  return gen->Results(results);
}

}  // namespace

Status MeasureGeneratorCapacity(const YcsbOptions& options, CapacityTarget target,
                                int middleware_threads, YcsbResults* results,
                                const std::atomic<bool>* cancel) {
  std::unique_ptr<Engine> noop = NewNoopEngine();
  if (target == CapacityTarget::kDirect) {
    YcsbGenerator gen(options, noop.get());
    return RunCancellable(&gen, cancel, results);
  }
  MiddlewareOptions mo;
  mo.control = target == CapacityTarget::kMiddleware;
  Middleware mw(mo);
  Status s = mw.Start(noop.get(), std::clamp(middleware_threads, 1, mo.max_threads), 1);
  if (!s.ok()) return s;
  Status run;
  {
    YcsbGenerator gen(options, &mw);
    run = RunCancellable(&gen, cancel, results);
  }
  Status stop = mw.Stop();
  return run.ok() ? stop : run;
}

}  // namespace nvmw
