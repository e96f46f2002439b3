// Round-robin CPU in virtual time: `cores` slots and one FIFO run queue; a job runs for at
// most `quantum` ns of work, then goes to the back of the queue if unfinished. A quantum
// near 0 approaches processor sharing; a large one is first-come first-served. The Linux
// scheduler sits in between (a woken thread waits behind running ones for up to a time
// slice), which is why the simulator fits the quantum instead of assuming either end.
#ifndef NVMW_SIM_RR_CPU_H_
#define NVMW_SIM_RR_CPU_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

namespace nvmw {
namespace sim {

class RoundRobinCpu {
 public:
  // speed: work units per ns of a running job (1 - background share of the host).
  RoundRobinCpu(int cores, double quantum, double speed)
      : slots_(std::max(1, cores)), quantum_(quantum), speed_(speed) {}

  int running() const {
    int n = 0;
    for (const Slot& s : slots_) n += s.busy ? 1 : 0;
    return n;
  }
  size_t queued() const { return queue_.size(); }

  void Add(double now, double work, uint64_t job) {
    for (Slot& s : slots_) {
      if (!s.busy) {
        Start(&s, now, {job, std::max(0.0, work)});
        return;
      }
    }
    queue_.push_back({job, std::max(0.0, work)});
  }

  // Time of the next slice end (a departure or a preemption), +inf when idle.
  double NextEvent() const {
    double t = std::numeric_limits<double>::infinity();
    for (const Slot& s : slots_) {
      if (s.busy && s.end < t) t = s.end;
    }
    return t;
  }

  // Removes job `job` before it finishes (at `now`): its core, if it is running, takes
  // the head of the run queue. False if it is not there.
  bool Remove(double now, uint64_t job) {
    for (Slot& s : slots_) {
      if (s.busy && s.job.id == job) {
        s.busy = false;
        if (!queue_.empty()) {
          const Job next = queue_.front();
          queue_.pop_front();
          Start(&s, now, next);
        }
        return true;
      }
    }
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->id == job) {
        queue_.erase(it);
        return true;
      }
    }
    return false;
  }

  // Processes the earliest slice end (at `now`). Returns true and the job's id when it
  // finished; false when it was preempted (and requeued) instead.
  bool Step(double now, uint64_t* done) {
    Slot* first = nullptr;
    for (Slot& s : slots_) {
      if (s.busy && (first == nullptr || s.end < first->end)) first = &s;
    }
    if (first == nullptr) return false;
    Job job = first->job;
    job.work -= first->slice;
    first->busy = false;
    const bool finished = job.work <= 1e-9;
    if (!finished) queue_.push_back(job);
    if (!queue_.empty()) {
      const Job next = queue_.front();
      queue_.pop_front();
      Start(first, now, next);
    }
    if (finished) *done = job.id;
    return finished;
  }

 private:
  struct Job {
    uint64_t id;
    double work;
  };
  struct Slot {
    bool busy = false;
    Job job{0, 0};
    double slice = 0;  // work done in this slice
    double end = 0;    // when the slice ends
  };

  void Start(Slot* s, double now, const Job& job) {
    s->busy = true;
    s->job = job;
    s->slice = quantum_ > 0 ? std::min(job.work, quantum_) : job.work;
    s->end = now + s->slice / speed_;
  }

  std::vector<Slot> slots_;
  std::deque<Job> queue_;
  double quantum_;
  double speed_;
};

}  // namespace sim
}  // namespace nvmw

#endif  // NVMW_SIM_RR_CPU_H_
