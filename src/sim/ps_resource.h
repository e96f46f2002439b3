// Processor sharing in virtual time for up to two kinds of jobs (the simulator's CPU has
// one kind; its device has two, read and write, whose rates depend on both counts).
//
// Every job of one kind progresses at the same rate, so each kind keeps a virtual clock
// V_k advancing at that rate; a job of `work` units arriving at V_k = v leaves when V_k
// reaches v + work. Jobs of a kind therefore leave in tag order, and the next departure
// is the earliest over kinds. The rate function is called once per (kind, n0, n1) below
// kMemo jobs of each kind (the results are memoised: rates depend on the counts only) and
// on every count change beyond.
#ifndef NVMW_SIM_PS_RESOURCE_H_
#define NVMW_SIM_PS_RESOURCE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

namespace nvmw {
namespace sim {

class PsResource {
 public:
  static constexpr int kMaxKinds = 2;
  // rate(kind, n0, n1): work units per ns for ONE job of `kind` when n0 jobs of kind 0
  // and n1 of kind 1 are active (the job itself included). Must be > 0.
  using RateFn = std::function<double(int kind, int n0, int n1)>;

  PsResource(int kinds, RateFn rate) : kinds_(kinds), rate_fn_(std::move(rate)) {}

  int active(int kind) const { return static_cast<int>(heap_[kind].size()); }
  int active() const { return active(0) + (kinds_ > 1 ? active(1) : 0); }

  // Adds a job at time `now` (ns, never before the last call's time).
  void Add(double now, int kind, double work, uint64_t job) {
    Advance(now);
    heap_[kind].push({clock_[kind] + (work > 0 ? work : 0), job});
    UpdateRates();
  }

  // Time of the next departure, +inf when idle (cached until the jobs change).
  double NextDeparture() const {
    if (next_valid_) return next_;
    double best = kInf;
    for (int k = 0; k < kinds_; k++) {
      if (heap_[k].empty()) continue;
      const double left = heap_[k].top().first - clock_[k];
      const double t = last_ + (left > 0 ? left / rate_[k] : 0.0);
      if (t < best) best = t;
    }
    next_ = best;
    next_valid_ = true;
    return best;
  }

  // Removes job `job` of `kind` before it departs (at `now`); false if it is not there.
  // O(active jobs of that kind).
  bool Remove(double now, int kind, uint64_t job) {
    Advance(now);
    std::vector<Entry> rest;
    bool found = false;
    while (!heap_[kind].empty()) {
      const Entry e = heap_[kind].top();
      heap_[kind].pop();
      if (!found && e.second == job) {
        found = true;
      } else {
        rest.push_back(e);
      }
    }
    for (const Entry& e : rest) heap_[kind].push(e);
    UpdateRates();
    return found;
  }

  // Removes the job that departs next (at `now`, its NextDeparture()); returns its id.
  uint64_t PopNext(double now) {
    int kind = 0;
    double best = kInf;
    for (int k = 0; k < kinds_; k++) {
      if (heap_[k].empty()) continue;
      const double left = heap_[k].top().first - clock_[k];
      const double t = last_ + (left > 0 ? left / rate_[k] : 0.0);
      if (t < best) best = t, kind = k;
    }
    Advance(now);
    const uint64_t job = heap_[kind].top().second;
    heap_[kind].pop();
    UpdateRates();
    return job;
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  using Entry = std::pair<double, uint64_t>;  // (tag, job)
  using MinHeap = std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>;

  void Advance(double now) {
    if (now > last_) {
      for (int k = 0; k < kinds_; k++) {
        if (!heap_[k].empty()) clock_[k] += rate_[k] * (now - last_);
      }
      last_ = now;
    }
  }

  void UpdateRates() {
    next_valid_ = false;
    const int n0 = active(0), n1 = kinds_ > 1 ? active(1) : 0;
    const bool memo = n0 < kMemo && n1 < kMemo;
    for (int k = 0; k < kinds_; k++) {
      if (heap_[k].empty()) {
        rate_[k] = 0.0;
        continue;
      }
      if (!memo) {
        rate_[k] = rate_fn_(k, n0, n1);
        continue;
      }
      if (memo_.empty()) memo_.assign(size_t(kinds_) * kMemo * kMemo, -1.0);
      double& m = memo_[(size_t(k) * kMemo + size_t(n0)) * kMemo + size_t(n1)];
      if (m < 0) m = rate_fn_(k, n0, n1);
      rate_[k] = m;
    }
  }

  static constexpr int kMemo = 64;
  std::vector<double> memo_;  // rate per (kind, n0, n1), -1 = not computed yet
  mutable double next_ = 0;
  mutable bool next_valid_ = false;

  int kinds_;
  RateFn rate_fn_;
  double last_ = 0;
  double clock_[kMaxKinds] = {0, 0};
  double rate_[kMaxKinds] = {0, 0};
  MinHeap heap_[kMaxKinds];
};

}  // namespace sim
}  // namespace nvmw

#endif  // NVMW_SIM_PS_RESOURCE_H_
