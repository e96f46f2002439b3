// The simulator's event loop (see include/nvmw/sim.h and docs/sim.md).
//
// A request's life: scheduled time -> a free client of its class takes it (else it waits
// in the class's client backlog) -> CPU: client_cpu -> issued (latency counts from here)
// -> ... -> CPU: op_cpu + bytes / copy -> device transfer (processor shared per device.h)
// -> device idle latency (a delay) -> done. What "..." is depends on the execution model:
//
// Caller-runs (the default, as the middleware's Execution::kCallerRuns), and every
// no-control run: the class's thread count is its number of permits. A request that finds
// a free permit and nobody waiting runs at once: a synchronous one on its client's own
// thread (no wake-up), an async one on a worker (CPU: wake_cpu). Otherwise it waits in the
// class's FIFO; a finishing request hands its permit to the FIFO's head, which wakes
// (CPU: wake_cpu) -- unless the head is async and the finisher is a worker, which then
// runs it without parking. With spin_us > 0 a synchronous waiter that finds a core free
// spins (a CPU job) for up to spin_us first; handed its permit meanwhile, it runs at once
// without the wake-up. A synchronous client continues on its own thread when its
// request is done; an async client went on right after issuing. No-control is the same
// path with one shared FIFO and no_control_max_inflight permits for both classes, and
// async requests run inline by their caller, as the middleware does.
//
// Hand-off (Execution::kHandOff, the earlier model): every issued request enters the class
// queue; a parked worker is woken (CPU: wake_cpu) unless one is already waking for it, or
// a busy worker takes it when it finishes; when done, a synchronous client is woken
// (CPU: wake_cpu) and takes its next request.
//
// Event sources: the two classes' next scheduled arrivals (a cursor into each looped
// schedule), the CPU, the device, and the device's idle latency (a constant per access
// kind, so completions leave it in FIFO order: two queues, no event heap). A class's
// client backlog (requests due while every client was busy) is a count of schedule
// entries behind a second cursor; a request is materialised when a client takes it.
//
// Fast-forward (SimOptions::fast_forward): a window is simulated in chunks; once the
// number of busy clients of both classes has stayed level for a stretch holding enough
// completions (the steady segment), the rest of the window is extrapolated from that
// segment instead of simulated: its latency histogram, scaled to the completions the
// rest would have (a class with idle clients completes what the schedule offers in the
// skipped stretch, counted exactly; a class with a backlog completes at the segment's
// rate), and the schedules jump over the skipped stretch (a backlog grows or shrinks by
// what was due minus what was served). Virtual time does not advance over the skip:
// requests in flight carry on in the next window as if it had passed.
#include "nvmw/sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <random>
#include <string>

#include "sim/ps_resource.h"
#include "sim/rr_cpu.h"
#include "middleware/window_stats.h"
#include "util/histogram.h"
#include "nvmw/middleware.h"

namespace nvmw {

namespace {

constexpr int kI = 0, kB = 1;
constexpr double kInf = std::numeric_limits<double>::infinity();

// What a CPU job is doing (its id is (request << 3) | stage; worker wakes use request
// ids too: the request the worker was woken for is not bound to it).
enum CpuStage : uint64_t {
  kClientIssue = 0,   // client's per-request CPU before issuing
  kWorkerWake = 1,    // hand-off: a parked worker waking (id holds the class, not a request)
  kServe = 2,         // engine operation of a request
  kClientWake = 3,    // hand-off: the client woken on completion
  kGrantWake = 4,     // permits: the thread that will run a just-granted request wakes
                      // (a parked synchronous caller, or a worker for an async request)
  kSpin = 5,          // permits: a synchronous waiter spinning before it parks
};

// A position in a class's looped schedule: entry `idx` of the loop that started at
// virtual time `base` (ns).
struct Cursor {
  size_t idx = 0;
  double base = 0;
};

// What a stretch of schedule holds.
struct Span {
  uint64_t n = 0;
  uint64_t bytes = 0;
  uint64_t writes = 0;
};

struct SimRequest {
  int cls = 0;
  bool write = false;
  bool async = false;   // its client did not wait for it (run by a worker)
  bool spinning = false;  // a waiter busy-waiting for its permit (a kSpin CPU job)
  uint32_t bytes = 0;
  double sched_ns = 0;
  double issue_ns = 0;
  double serve_us = 0;   // CPU of its engine operation before jitter (EntryCost)
  double dev_work = 0;   // its device work (DeviceModel::WorkBytes)
  uint32_t epoch = 0;
};

// What one schedule entry costs, fixed by its size and kind: computed once per workload
// instead of once per request.
struct EntryCost {
  double serve_us;  // op_cpu_us + bytes / copy_bytes_per_ns / 1000
  double dev_work;  // device work units of the access (0 with a passthrough device)
};

bool Finite(double x) { return std::isfinite(x); }

// The standard normal quantile function: Acklam's rational approximation refined by one
// Halley step on erfc (relative error near machine precision), for u in (0, 1).
double NormalQuantile(double u) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425, hi = 1 - lo;
  double x;
  if (u < lo) {
    const double q = std::sqrt(-2 * std::log(u));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (u <= hi) {
    const double q = u - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log1p(-u));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - u;
  const double g = e * 2.5066282746310002 * std::exp(x * x / 2);  // sqrt(2 pi)
  return x - g / (1 + x * g / 2);
}

// Log-normal factors exp(sigma Z) drawn by inversion: the quantile function is tabulated at
// kCells + 1 points and interpolated linearly inside, the two outer cells (probability
// 2 / kCells) are inverted exactly. One 64-bit draw per factor, no exp or log on the
// common path (the CPU costs of every simulated request draw one each).
class LogNormalJitter {
 public:
  static constexpr int kCells = 4096;
  explicit LogNormalJitter(double sigma) : sigma_(sigma), q_(kCells + 1) {
    for (int i = 1; i < kCells; i++) q_[i] = std::exp(sigma_ * NormalQuantile(double(i) / kCells));
  }
  template <class Rng>
  double operator()(Rng& rng) const {
    const double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    const double x = u * kCells;
    const int i = int(x);
    if (i == 0 || i >= kCells - 1) return std::exp(sigma_ * NormalQuantile(std::max(u, 0x1.0p-60)));
    const double f = x - i;
    return q_[i] + f * (q_[i + 1] - q_[i]);
  }

 private:
  double sigma_;
  std::vector<double> q_;
};

}  // namespace

struct Simulator::Impl {
  SimOptions opt;
  DeviceModel device;
  sim::PsResource ps_cpu;   // quantum_us == 0: processor sharing
  sim::RoundRobinCpu rr_cpu;  // quantum_us > 0: round robin with that quantum
  bool round_robin;
  sim::PsResource dev;
  std::mt19937_64 rng;
  LogNormalJitter jitter;
  uint64_t processed = 0;
  double now = 0;  // ns
  double nominal = 0;  // ns of windows reported (= now without fast-forward skips)
  uint64_t window_seq = 0;
  // Device idle latency per access kind (0 read, 1 write): constant, so FIFO.
  std::deque<std::pair<double, uint64_t>> latency_fifo[2];

  // Requests: a pool with a free list.
  std::vector<SimRequest> reqs;
  std::vector<uint64_t> free_reqs;

  // Workload.
  SimClassWorkload work[2];
  std::vector<uint64_t> cum_bytes[2], cum_writes[2];  // prefix sums over the schedule
  std::vector<EntryCost> entry_cost[2];                // per schedule entry
  Cursor arrive[2];    // next scheduled request not yet due
  Cursor take[2];      // oldest backlogged request (valid when backlog[c] > 0)
  uint64_t backlog[2] = {0, 0};  // requests due but not yet taken by a client
  double next_arrival[2] = {kInf, kInf};
  uint32_t epoch = 0;  // bumped by SetWorkload: old requests no longer free clients
  int free_clients[2] = {0, 0};
  // Busy clients per class, integrated over time (fast-forward's steadiness test).
  double busy_area[2] = {0, 0};
  double busy_since = 0;

  // Middleware.
  const bool permits_path;  // caller-runs, or no-control (either execution)
  int target[2] = {0, 0};   // thread counts: the pools' sizes, or the permit limits
  // Hand-off: class queues and worker pools.
  std::deque<uint64_t> queue[2];
  int total[2] = {0, 0};
  int idle[2] = {0, 0};
  int waking[2] = {0, 0};
  // Permits: one pool per class, or one shared (index 2) in no-control mode.
  struct PermitPool {
    int limit = 0;
    int in_use = 0;
    std::deque<uint64_t> fifo;  // requests waiting for a permit, oldest first
  };
  PermitPool pools[3];
  uint64_t waiting[2] = {0, 0};  // per class: requests in a FIFO
  uint64_t ready[2] = {0, 0};    // per class: async requests granted, their worker waking

  ClassAccum win[2];    // completed requests of the open window, per class
  // Fast-forward: latencies completed since the transient, per class, and per chunk of
  // the candidate steady segment where its completions start and its mean busy clients.
  bool ff_collect = false;
  bool disturbed = true;  // threads or workload changed since the last window
  std::vector<uint64_t> ff_lat[2];
  struct FfChunk {
    size_t first[2];
    double busy[2];
  };
  std::vector<FfChunk> ff_segment;
  Histogram seg_hist[2];

  explicit Impl(const SimOptions& o)
      : opt(o),
        device(o.device),
        ps_cpu(1, [this](int, int n0, int) {
          const double cores = opt.params.cores * (1.0 - opt.params.background);
          return n0 <= cores ? 1.0 : cores / n0;
        }),
        rr_cpu(int(std::lround(o.params.cores)), o.params.quantum_us * 1000.0, 1.0 - o.params.background),
        round_robin(o.params.quantum_us > 0),
        dev(2, [this](int kind, int n0, int n1) {
          return device.RatePerAccessor(kind == 0 ? DeviceOp::kRead : DeviceOp::kWrite, n0, n1);
        }),
        rng(o.seed),
        jitter(o.params.jitter),
        permits_path(!o.control || o.execution == Execution::kCallerRuns) {
    pools[2].limit = o.no_control_max_inflight;
  }

  // The CPU, whichever model: add a job, time of its next event, process that event
  // (true with the job's id when a job finished).
  void CpuAdd(double work, uint64_t job) {
    if (round_robin) {
      rr_cpu.Add(now, work, job);
    } else {
      ps_cpu.Add(now, 0, work, job);
    }
  }
  double CpuNext() const { return round_robin ? rr_cpu.NextEvent() : ps_cpu.NextDeparture(); }
  void CpuRemove(uint64_t job) {
    if (round_robin) {
      rr_cpu.Remove(now, job);
    } else {
      ps_cpu.Remove(now, 0, job);
    }
  }
  // Some CPU is idle: fewer runnable jobs than cores left by the background load.
  bool CpuHasFreeCore() const {
    if (round_robin) return rr_cpu.running() < int(std::lround(opt.params.cores)) && rr_cpu.queued() == 0;
    return ps_cpu.active() < opt.params.cores * (1.0 - opt.params.background);
  }
  bool CpuStep(uint64_t* job) {
    if (round_robin) return rr_cpu.Step(now, job);
    *job = ps_cpu.PopNext(now);
    return true;
  }

  double CpuCost(double us) {
    double ns = us * 1000.0;
    if (opt.params.jitter > 0) ns *= jitter(rng);
    return ns;
  }


  uint64_t NewRequest() {
    if (!free_reqs.empty()) {
      uint64_t id = free_reqs.back();
      free_reqs.pop_back();
      return id;
    }
    reqs.emplace_back();
    return reqs.size() - 1;
  }

  // ---- workload ------------------------------------------------------------------
  double EntryTime(int c, const Cursor& k) const { return k.base + work[c].times_us[k.idx] * 1000.0; }

  // Moves cursor k to the next entry; false when a one-pass schedule is exhausted.
  bool Next(int c, Cursor* k) const {
    const SimClassWorkload& w = work[c];
    if (++k->idx < w.times_us.size()) return true;
    if (!(w.period_us > 0)) return false;
    k->idx = 0;
    k->base += w.period_us * 1000.0;
    return true;
  }

  void ScheduleArrival(int c) {
    const SimClassWorkload& w = work[c];
    if (arrive[c].idx >= w.times_us.size()) {
      next_arrival[c] = kInf;
      return;
    }
    next_arrival[c] = std::max(EntryTime(c, arrive[c]), now);
  }

  // Schedule entries [from, from + n) of class c (n may span loops): counts and sums.
  Span SpanOf(int c, const Cursor& from, uint64_t n) const {
    const size_t len = work[c].times_us.size();
    Span s;
    if (n == 0 || len == 0) return s;
    const uint64_t tb = cum_bytes[c][len], tw = cum_writes[c][len];
    auto add = [&](size_t a, size_t b) {  // entries [a, b) of one loop
      s.bytes += cum_bytes[c][b] - cum_bytes[c][a];
      s.writes += cum_writes[c][b] - cum_writes[c][a];
    };
    const uint64_t first = std::min<uint64_t>(n, len - from.idx);
    add(from.idx, from.idx + first);
    uint64_t left = n - first;
    const uint64_t loops = left / len;
    s.bytes += loops * tb;
    s.writes += loops * tw;
    left -= loops * len;
    add(0, size_t(left));
    s.n = n;
    return s;
  }

  // Advances cursor k by n entries (a looped schedule).
  void Advance(int c, Cursor* k, uint64_t n) const {
    const SimClassWorkload& w = work[c];
    const size_t len = w.times_us.size();
    if (n == 0 || len == 0) return;
    const uint64_t pos = k->idx + n;
    if (!(w.period_us > 0)) {
      k->idx = size_t(std::min<uint64_t>(pos, len));
      return;
    }
    k->idx = size_t(pos % len);
    k->base += double(pos / len) * w.period_us * 1000.0;
  }

  // How many entries from cursor k are due before virtual time `end`.
  uint64_t DueBefore(int c, const Cursor& k, double end) const {
    const SimClassWorkload& w = work[c];
    const size_t len = w.times_us.size();
    if (k.idx >= len) return 0;
    const auto& t = w.times_us;
    auto count_in_loop = [&](size_t from, double base) {  // entries >= from with time < end
      const double lim = (end - base) / 1000.0;
      return size_t(std::lower_bound(t.begin() + from, t.end(), lim) - t.begin()) - from;
    };
    const size_t first = count_in_loop(k.idx, k.base);
    if (k.idx + first < len || !(w.period_us > 0)) return first;
    const double period = w.period_us * 1000.0;
    double base = k.base + period;
    uint64_t n = first;
    // Whole loops due before `end`: their last entry is.
    const double last = t.back() * 1000.0;
    if (base + last < end) {
      const uint64_t loops = uint64_t(std::floor((end - base - last) / period)) + 1;
      n += loops * len;
      base += double(loops) * period;
    }
    return n + count_in_loop(0, base);
  }

  SimRequest& Materialise(int c, const Cursor& k, uint64_t* id_out) {
    const SimClassWorkload& w = work[c];
    const uint64_t id = NewRequest();
    SimRequest& r = reqs[id];
    r = SimRequest();
    r.cls = c;
    r.write = w.writes[k.idx] != 0;
    r.async = w.async && opt.control;  // no-control runs async requests inline
    r.bytes = w.bytes[k.idx];
    r.serve_us = entry_cost[c][k.idx].serve_us;
    r.dev_work = entry_cost[c][k.idx].dev_work;
    r.sched_ns = EntryTime(c, k);
    r.epoch = epoch;
    *id_out = id;
    return r;
  }

  void NoteBusy() {
    const double dt = now - busy_since;
    if (dt > 0) {
      for (int c = 0; c < 2; c++) busy_area[c] += dt * (work[c].clients - free_clients[c]);
      busy_since = now;
    }
  }

  void OnArrival(int c) {
    if (free_clients[c] > 0 && backlog[c] == 0) {
      uint64_t id = 0;
      Materialise(c, arrive[c], &id);
      NoteBusy();
      free_clients[c]--;
      CpuAdd(CpuCost(opt.params.client_cpu_us), (id << 3) | kClientIssue);
    } else {
      if (backlog[c]++ == 0) take[c] = arrive[c];
    }
    if (!Next(c, &arrive[c])) arrive[c].idx = work[c].times_us.size();
    ScheduleArrival(c);
  }

  void ClientFree(int c) {
    if (backlog[c] > 0) {
      uint64_t id = 0;
      Materialise(c, take[c], &id);
      backlog[c]--;
      Next(c, &take[c]);
      CpuAdd(CpuCost(opt.params.client_cpu_us), (id << 3) | kClientIssue);
    } else {
      NoteBusy();
      free_clients[c]++;
    }
  }

  // ---- middleware ----
  void Issue(uint64_t id) {
    SimRequest& r = reqs[id];
    r.issue_ns = now;
    const bool frees_client = r.async && r.epoch == epoch;
    const int c = r.cls;
    if (permits_path) {
      Acquire(id);
    } else {
      queue[c].push_back(id);
      Dispatch(c);
    }
    // An async client goes on with its next request at once.
    if (frees_client) ClientFree(c);
  }

  // ---- permits (caller-runs, no-control) ----------------------------------------
  PermitPool& PoolOf(int c) { return pools[opt.control ? c : 2]; }

  void Acquire(uint64_t id) {
    const SimRequest& r = reqs[id];
    PermitPool& p = PoolOf(r.cls);
    if (p.fifo.empty() && p.in_use < p.limit) {
      p.in_use++;
      if (r.async) {
        ready[r.cls]++;
        CpuAdd(CpuCost(opt.params.wake_cpu_us), (id << 3) | kGrantWake);
      } else {
        StartServe(id);  // on the caller's own thread
      }
    } else {
      p.fifo.push_back(id);
      waiting[r.cls]++;
      // A synchronous waiter spins for spin_us before parking when a core is free (as
      // MiddlewareOptions::spin_ns): handed its permit meanwhile, it needs no wake-up.
      if (!r.async && opt.params.spin_us > 0 && CpuHasFreeCore()) {
        reqs[id].spinning = true;
        CpuAdd(opt.params.spin_us * 1000.0, (id << 3) | kSpin);
      }
    }
  }

  // Hands free permits of pool p to its FIFO in order. `worker_class` >= 0: the caller
  // is a worker of that class that just finished, and runs the first async request it
  // grants itself instead of waking another worker.
  void Grant(PermitPool& p, int worker_class) {
    while (!p.fifo.empty() && p.in_use < p.limit) {
      const uint64_t id = p.fifo.front();
      p.fifo.pop_front();
      p.in_use++;
      const SimRequest& r = reqs[id];
      waiting[r.cls]--;
      if (r.async && r.cls == worker_class) {
        worker_class = -1;
        StartServe(id);
        continue;
      }
      if (r.spinning) {
        reqs[id].spinning = false;
        CpuRemove((id << 3) | kSpin);
        StartServe(id);
        continue;
      }
      if (r.async) ready[r.cls]++;
      CpuAdd(CpuCost(opt.params.wake_cpu_us), (id << 3) | kGrantWake);
    }
  }

  // ---- hand-off (workers run everything) ----------------------------------------
  void Dispatch(int c) {
    while (idle[c] > 0 && int(queue[c].size()) > waking[c]) {
      idle[c]--;
      waking[c]++;
      CpuAdd(CpuCost(opt.params.wake_cpu_us), (uint64_t(c) << 3) | kWorkerWake);
    }
  }

  // A worker of class c is free (just woke, or finished a request): retire it if the
  // pool shrank, else take the queue's head, else park.
  void WorkerFree(int c) {
    if (total[c] > target[c]) {
      total[c]--;
      return;
    }
    if (!queue[c].empty()) {
      const uint64_t id = queue[c].front();
      queue[c].pop_front();
      StartServe(id);
    } else {
      idle[c]++;
    }
  }

  void StartServe(uint64_t id) { CpuAdd(CpuCost(reqs[id].serve_us), (id << 3) | kServe); }

  EntryCost CostOf(bool write, uint32_t bytes) const {
    EntryCost e;
    e.serve_us = opt.params.op_cpu_us + bytes / opt.params.copy_bytes_per_ns / 1000.0;
    e.dev_work = device.passthrough() ? 0.0
                                      : device.WorkBytes(write ? DeviceOp::kWrite : DeviceOp::kRead, bytes + 16);
    return e;
  }

  void AfterServe(uint64_t id) {
    const SimRequest& r = reqs[id];
    if (device.passthrough()) {
      Complete(id);
      return;
    }
    dev.Add(now, r.write ? 1 : 0, r.dev_work, id);
  }

  void AfterDevice(uint64_t id) {
    const SimRequest& r = reqs[id];
    const double lat = device.LatencyNs(r.write ? DeviceOp::kWrite : DeviceOp::kRead);
    if (lat > 0) {
      latency_fifo[r.write ? 1 : 0].emplace_back(now + lat, id);
    } else {
      Complete(id);
    }
  }

  void Complete(uint64_t id) {
    const SimRequest& r = reqs[id];
    const int c = r.cls;
    const uint64_t lat = uint64_t(std::max(0.0, now - r.issue_ns));
    win[c].Record(lat, r.bytes, r.write, false);
    if (ff_collect) ff_lat[c].push_back(lat);
    if (permits_path) {
      PermitPool& p = PoolOf(c);
      p.in_use--;
      Grant(p, r.async ? c : -1);
      if (r.async) {
        free_reqs.push_back(id);  // its client went on long ago
      } else {
        Release(id);  // the caller goes on on its own thread
      }
      return;
    }
    WorkerFree(c);
    if (r.async) {
      free_reqs.push_back(id);  // the completion runs on the worker
      return;
    }
    // The client wakes on its own CPU time; the request slot is released after that.
    CpuAdd(CpuCost(opt.params.wake_cpu_us), (id << 3) | kClientWake);
  }

  void Release(uint64_t id) {
    const int c = reqs[id].cls;
    const bool current = reqs[id].epoch == epoch;
    free_reqs.push_back(id);
    // Clients of a replaced workload just go away; the new one brought its own.
    if (current) ClientFree(c);
  }

  void OnCpuDone(uint64_t job) {
    const uint64_t id = job >> 3;
    switch (job & 7) {
      case kClientIssue:
        Issue(id);
        break;
      case kWorkerWake: {
        const int c = int(id);
        waking[c]--;
        WorkerFree(c);
        Dispatch(c);
        break;
      }
      case kServe:
        AfterServe(id);
        break;
      case kClientWake:
        Release(id);
        break;
      case kGrantWake:
        if (reqs[id].async) ready[reqs[id].cls]--;
        StartServe(id);
        break;
      case kSpin:
        reqs[id].spinning = false;  // spun out without its permit: it parks
        break;
    }
  }

  void Resize(int i, int b) {
    const int want[2] = {i, b};
    if (want[0] != target[0] || want[1] != target[1]) disturbed = true;
    for (int c = 0; c < 2; c++) {
      target[c] = want[c];
      if (permits_path) {
        // Growing admits waiters at once; shrinking takes effect as permits come back.
        pools[c].limit = want[c];
        Grant(pools[c], -1);
        continue;
      }
      if (total[c] < target[c]) {
        idle[c] += target[c] - total[c];
        total[c] = target[c];
      } else if (total[c] > target[c]) {
        const int retire = std::min(idle[c], total[c] - target[c]);
        idle[c] -= retire;
        total[c] -= retire;
      }
      Dispatch(c);
    }
  }

  // ---- the loop ------------------------------------------------------------------
  void RunUntil(double end) {
    for (;;) {
      const double ta = std::min(next_arrival[0], next_arrival[1]);
      const double tl0 = latency_fifo[0].empty() ? kInf : latency_fifo[0].front().first;
      const double tl1 = latency_fifo[1].empty() ? kInf : latency_fifo[1].front().first;
      const double tl = std::min(tl0, tl1);
      const double tc = CpuNext();
      const double td = dev.NextDeparture();
      const double t = std::min(std::min(ta, tl), std::min(tc, td));
      if (!(t <= end)) break;
      now = std::max(now, t);
      processed++;
      if (t == tc) {
        uint64_t job = 0;
        if (CpuStep(&job)) OnCpuDone(job);
      } else if (t == td) {
        AfterDevice(dev.PopNext(now));
      } else if (t == tl) {
        auto& q = latency_fifo[tl0 <= tl1 ? 0 : 1];
        const uint64_t id = q.front().second;
        q.pop_front();
        Complete(id);
      } else {
        OnArrival(next_arrival[0] <= next_arrival[1] ? 0 : 1);
      }
    }
    now = std::max(now, end);
  }

  // Runs one window of `len` ns. Without fast-forward: all of it. With: in chunks; the
  // chunks after the first two (the transient a thread change or phase switch starts;
  // none when neither happened) form the candidate steady segment. Once it holds at least four chunks and enough
  // completions, it is tested: the mean busy clients of its first and second halves must
  // agree within ff_tolerance x the larger + 2, per class. Level: the rest of the window
  // is extrapolated from it. Not level: its first half becomes transient (simulated,
  // counted once) and the segment grows on.
  void RunWindowBody(double len) {
    const double chunk_ns = opt.ff_chunk_s * 1e9;
    if (!opt.fast_forward || len < 8 * chunk_ns) {
      RunUntil(now + len);
      return;
    }
    std::vector<FfChunk>& segment = ff_segment;
    segment.clear();
    for (int c = 0; c < 2; c++) ff_lat[c].clear();
    // After a thread change or a phase switch the first two chunks are the transient
    // (counted once, never extrapolated); a window that goes on from a steady one has none.
    const int transient = disturbed ? 2 : 0;
    disturbed = false;
    double done = 0;
    int chunks = 0;
    while (done < len) {
      const double step = std::min(chunk_ns, len - done);
      if (chunks == transient) ff_collect = true;  // the transient is over: collect the segment
      FfChunk k;
      for (int c = 0; c < 2; c++) k.first[c] = ff_lat[c].size();
      NoteBusy();
      const double area0[2] = {busy_area[0], busy_area[1]};
      RunUntil(now + step);
      NoteBusy();
      done += step;
      chunks++;
      if (step < chunk_ns || chunks <= transient) continue;  // partial last chunk, or the transient
      for (int c = 0; c < 2; c++) k.busy[c] = (busy_area[c] - area0[c]) / step;
      segment.push_back(k);
      const double rest = len - done;
      if (rest < chunk_ns || segment.size() < 4) continue;
      if (!Enough(kI, opt.ff_min_ops) || !Enough(kB, std::max(1, opt.ff_min_ops / 10))) continue;
      const size_t half = segment.size() / 2;
      bool level = true;
      for (int c = 0; c < 2; c++) {
        double m1 = 0, m2 = 0;
        for (size_t i = 0; i < segment.size(); i++) (i < half ? m1 : m2) += segment[i].busy[c];
        m1 /= double(half);
        m2 /= double(segment.size() - half);
        if (std::fabs(m1 - m2) > opt.ff_tolerance * std::max(m1, m2) + 2.0) level = false;
      }
      if (level) {
        ff_collect = false;
        for (int c = 0; c < 2; c++) {
          seg_hist[c].Clear();
          for (size_t i = segment.front().first[c]; i < ff_lat[c].size(); i++) seg_hist[c].Record(ff_lat[c][i]);
        }
        Skip(rest, double(segment.size()) * chunk_ns);
        return;
      }
      segment.erase(segment.begin(), segment.begin() + long(half));
    }
    ff_collect = false;
  }

  // Whether the segment holds enough completions of class c: `min_ops`, or, for a class
  // whose schedule offers fewer in a whole window, that many (so that a sparse class is
  // simulated for about the whole window; nothing for a class offering less than one).
  bool Enough(int c, int64_t min_ops) const {
    const SimClassWorkload& w = work[c];
    if (w.times_us.empty()) return true;
    const double span_us = w.period_us > 0 ? w.period_us : w.times_us.back() + 1.0;
    const double per_window = double(w.times_us.size()) / span_us * opt.window_s * 1e6;
    const double need = std::floor(std::min(double(min_ops), per_window));
    return double(ff_lat[c].size() - ff_segment.front().first[c]) >= need;
  }

  // Extrapolates `rest` ns of steady state from the segment (`seg_len` ns) and moves the
  // schedules over it.
  void Skip(double rest, double seg_len) {
    for (int c = 0; c < 2; c++) {
      const size_t len = work[c].times_us.size();
      // What the schedule offers in the skipped stretch (from the next due entry).
      const double end = now + rest;
      const uint64_t due = len == 0 ? 0 : DueBefore(c, arrive[c], end);
      const Span offered = SpanOf(c, arrive[c], due);
      Span served;
      const double seg_n = double(seg_hist[c].count());
      if (backlog[c] == 0 && free_clients[c] > 0) {
        // Clients keep up: the stretch completes what it offers.
        served = offered;
      } else {
        // Every client busy: the stretch completes at the segment's rate, from the backlog
        // first (oldest), then from what falls due.
        const uint64_t rate_n = uint64_t(std::llround(seg_n * rest / seg_len));
        const uint64_t n = std::min<uint64_t>(rate_n, backlog[c] + due);
        const uint64_t from_backlog = std::min<uint64_t>(n, backlog[c]);
        Span a = SpanOf(c, take[c], from_backlog);
        if (backlog[c] == 0) take[c] = arrive[c];
        Advance(c, &take[c], n);
        Span b = SpanOf(c, arrive[c], n - from_backlog);
        served.n = n;
        served.bytes = a.bytes + b.bytes;
        served.writes = a.writes + b.writes;
        backlog[c] = backlog[c] + due - n;
      }
      if (seg_n > 0 && served.n > 0) {
        win[c].latency_ns.MergeScaled(seg_hist[c], double(served.n) / seg_n);
        win[c].bytes += served.bytes;
        win[c].writes += served.writes;
      }
      // The schedule jumps over the stretch: what fell due in it is skipped (or now in
      // the backlog), and the next entry is due `rest` earlier than it was.
      Advance(c, &arrive[c], due);
      arrive[c].base -= rest;
      if (backlog[c] > 0) take[c].base -= rest;
      ScheduleArrival(c);
    }
  }

  // Closes class c's window: the middleware's own window arithmetic. The queue is not
  // sampled during the window, so its mean is its length at the end.
  ClassStats CloseClass(int c, double secs) const {
    // Waiting requests, as the middleware counts them: for permits, those in a FIFO plus
    // async ones granted but not yet taken by a worker; for hand-off, the class queue.
    const uint64_t qend = permits_path ? waiting[c] + ready[c] : queue[c].size();
    return MakeClassStats(win[c], 0, secs, qend, double(qend), opt.control ? target[c] : 0);
  }
};

Simulator::Simulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Simulator::~Simulator() = default;

Status Simulator::Create(const SimOptions& o, std::unique_ptr<Simulator>* out) {
  if (out == nullptr) return Status::InvalidArgument("Create needs an output");
  const SimParams& p = o.params;
  // At most a day, as Middleware's windows: much longer ones overflow the virtual clock
  // (1e300 s made the second RunWindow spin forever) and the windows' operation counts.
  if (!(o.window_s > 0 && o.window_s <= 86400)) {
    return Status::InvalidArgument("window_s must be in (0, 86400]");
  }
  if (o.max_threads < 1) return Status::InvalidArgument("max_threads must be >= 1");
  if (o.no_control_max_inflight < 1) return Status::InvalidArgument("no_control_max_inflight must be >= 1");
  if (o.execution != Execution::kCallerRuns && o.execution != Execution::kHandOff) {
    return Status::InvalidArgument("execution must be caller-runs or hand-off");
  }
  if (!(p.cores > 0) || !(p.background >= 0 && p.background < 1) || !(p.client_cpu_us >= 0) ||
      !(p.wake_cpu_us >= 0) || !(p.op_cpu_us >= 0) || !(p.copy_bytes_per_ns > 0) || !(p.jitter >= 0) ||
      !(p.quantum_us >= 0) || !Finite(p.quantum_us) || (p.quantum_us > 0 && std::lround(p.cores) < 1) ||
      !(p.spin_us >= 0) || !Finite(p.spin_us) ||
      !Finite(p.cores) || !Finite(p.client_cpu_us) || !Finite(p.wake_cpu_us) || !Finite(p.op_cpu_us) ||
      !Finite(p.copy_bytes_per_ns) || !Finite(p.jitter)) {
    return Status::InvalidArgument("sim params out of range: cores > 0, 0 <= background < 1, costs >= 0, copy > 0, quantum >= 0, spin >= 0");
  }
  if (!(o.ff_chunk_s > 0) || !Finite(o.ff_chunk_s) || o.ff_min_ops < 1 || !(o.ff_tolerance >= 0) ||
      !Finite(o.ff_tolerance)) {
    return Status::InvalidArgument("fast-forward options: ff_chunk_s > 0, ff_min_ops >= 1, ff_tolerance >= 0");
  }
  if (!o.device.passthrough) {
    Status s = ValidateDeviceProfile(o.device);
    if (!s.ok()) return s;
  }
  auto impl = std::make_unique<Impl>(o);
  std::unique_ptr<Simulator> sim(new Simulator(std::move(impl)));
  Status s = sim->SetThreads(o.interactive_threads, o.batch_threads);
  if (!s.ok()) return s;
  *out = std::move(sim);
  return Status::OK();
}

Status Simulator::SetWorkload(const SimClassWorkload& interactive, const SimClassWorkload& batch,
                              double start_offset_us) {
  const SimClassWorkload* ws[2] = {&interactive, &batch};
  for (const SimClassWorkload* w : ws) {
    const size_t n = w->times_us.size();
    if (w->writes.size() != n || w->bytes.size() != n) {
      return Status::InvalidArgument("workload: times_us, writes and bytes must have the same length");
    }
    if (w->clients < 1) return Status::InvalidArgument("workload: clients must be >= 1");
    if (!(w->period_us >= 0) || !Finite(w->period_us)) return Status::InvalidArgument("workload: bad period_us");
    for (size_t i = 0; i < n; i++) {
      if (!(w->times_us[i] >= 0) || !Finite(w->times_us[i]) || (i > 0 && w->times_us[i] < w->times_us[i - 1])) {
        return Status::InvalidArgument("workload: times_us must be finite, >= 0 and sorted");
      }
    }
    if (n > 0 && w->period_us > 0 && w->period_us <= w->times_us.back()) {
      return Status::InvalidArgument("workload: period_us must exceed the last time");
    }
  }
  if (!(start_offset_us >= 0) || !Finite(start_offset_us)) {
    return Status::InvalidArgument("start_offset_us must be >= 0");
  }
  Impl& m = *impl_;
  m.NoteBusy();
  m.disturbed = true;
  m.epoch++;
  for (int c = 0; c < 2; c++) {
    m.work[c] = *ws[c];
    m.free_clients[c] = m.work[c].clients;
    // Backlogged requests of the old workload are dropped (never issued).
    m.backlog[c] = 0;
    const SimClassWorkload& w = m.work[c];
    const size_t n = w.times_us.size();
    m.cum_bytes[c].assign(n + 1, 0);
    m.cum_writes[c].assign(n + 1, 0);
    m.entry_cost[c].resize(n);
    for (size_t i = 0; i < n; i++) {
      m.cum_bytes[c][i + 1] = m.cum_bytes[c][i] + w.bytes[i];
      m.cum_writes[c][i + 1] = m.cum_writes[c][i] + (w.writes[i] ? 1 : 0);
      m.entry_cost[c][i] = m.CostOf(w.writes[i] != 0, w.bytes[i]);
    }
    // Start `start_offset_us` into the (looped) schedule.
    m.arrive[c] = Cursor{0, m.now};
    if (n > 0) {
      double off = start_offset_us;
      if (w.period_us > 0) off = std::fmod(off, w.period_us);
      const size_t i = size_t(std::lower_bound(w.times_us.begin(), w.times_us.end(), off) - w.times_us.begin());
      m.arrive[c] = Cursor{i, m.now - off * 1000.0};
      if (i == n && w.period_us > 0) m.arrive[c] = Cursor{0, m.now - off * 1000.0 + w.period_us * 1000.0};
    }
    m.take[c] = m.arrive[c];
    m.ScheduleArrival(c);
  }
  return Status::OK();
}

Status Simulator::SetThreads(int interactive, int batch) {
  const int max = impl_->opt.max_threads;
  if (interactive < 1 || interactive > max || batch < 1 || batch > max) {
    return Status::InvalidArgument("thread counts must be in [1, " + std::to_string(max) + "]");
  }
  if (impl_->opt.control) impl_->Resize(interactive, batch);
  return Status::OK();
}

void Simulator::GetThreads(int* interactive, int* batch) const {
  if (interactive) *interactive = impl_->opt.control ? impl_->target[kI] : 0;
  if (batch) *batch = impl_->opt.control ? impl_->target[kB] : 0;
}

Status Simulator::RunWindow(WindowStats* out) {
  if (out == nullptr) return Status::InvalidArgument("RunWindow needs an output");
  Impl& m = *impl_;
  const double start = m.nominal;
  const double secs = m.opt.window_s;
  m.RunWindowBody(secs * 1e9);
  m.nominal += secs * 1e9;
  WindowStats w;
  w.seq = ++m.window_seq;
  w.start_s = start / 1e9;
  w.duration_s = secs;
  w.interactive = m.CloseClass(kI, secs);
  w.batch = m.CloseClass(kB, secs);
  ClassAccum all = m.win[kI];
  all.Merge(m.win[kB]);
  w.all = MakeClassStats(all, 0, secs, w.interactive.queue_len_end + w.batch.queue_len_end,
                         w.interactive.queue_len_mean + w.batch.queue_len_mean,
                         w.interactive.threads + w.batch.threads);
  for (int c = 0; c < 2; c++) m.win[c].Clear();
  *out = w;
  return Status::OK();
}

double Simulator::now_s() const { return impl_->nominal / 1e9; }
double Simulator::virtual_s() const { return impl_->now / 1e9; }
uint64_t Simulator::events() const { return impl_->processed; }

}  // namespace nvmw
