// TestEngine: an in-memory Engine for the middleware tests, with injectable per-op
// delays, a gate that blocks operations until opened, a failure key, a hook run inside
// every operation, and counters (calls per op, operations in flight and their maximum,
// overall and per first character of the key, executions per key).
#ifndef NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_
#define NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <array>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nvmw/engine.h"

namespace nvmw::testing {

class TestEngine : public Engine {
 public:
  // Delays applied inside every operation (sleep), to give latencies a known floor.
  std::atomic<int64_t> get_delay_ns{0};
  std::atomic<int64_t> put_delay_ns{0};
  // Operations on this key fail with IOError (counted as errors by the middleware).
  std::string fail_key = "__fail__";
  // Record the order in which keys are executed (FIFO tests).
  std::atomic<bool> record_order{false};
  // Runs inside every operation (after the gate, before the delay), on the thread that
  // runs it. Set before the engine is used; not changed while operations run.
  std::function<void(std::string_view key)> on_op;

  Status Get(std::string_view key, const ValueFn& fn) override {
    Scope scope(this, OpKind::kGet, key);
    if (key == fail_key) return Status::IOError("injected failure");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(std::string(key));
    if (it == map_.end()) return Status::NotFound();
    fn(it->second);
    return Status::OK();
  }
  Status Put(std::string_view key, std::string_view value) override {
    Scope scope(this, OpKind::kPut, key);
    if (key == fail_key) return Status::IOError("injected failure");
    if (key.empty()) return Status::InvalidArgument("empty key");
    std::lock_guard<std::mutex> lock(mu_);
    map_[std::string(key)] = std::string(value);
    return Status::OK();
  }
  Status Remove(std::string_view key) override {
    Scope scope(this, OpKind::kRemove, key);
    if (key == fail_key) return Status::IOError("injected failure");
    std::lock_guard<std::mutex> lock(mu_);
    return map_.erase(std::string(key)) ? Status::OK() : Status::NotFound();
  }
  Status Exists(std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.count(std::string(key)) ? Status::OK() : Status::NotFound();
  }
  uint64_t Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  const char* Name() const override { return "test"; }

  // Gate: while closed, every operation blocks on entry (after being counted in flight).
  void CloseGate() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      gate_open_ = true;
    }
    gate_cv_.notify_all();
  }
  // Waits (bounded) until at least n operations are in flight; false on timeout.
  bool WaitInflight(int n, double timeout_s = 10) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (inflight_.load() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
  }

  uint64_t gets() const { return gets_.load(); }
  uint64_t puts() const { return puts_.load(); }
  uint64_t removes() const { return removes_.load(); }
  int max_inflight() const { return max_inflight_.load(); }
  int inflight() const { return inflight_.load(); }
  // The same per first character of the key (tests give each class its own prefix).
  int max_inflight(char prefix) const { return max_by_prefix_[Slot(prefix)].load(); }
  int inflight(char prefix) const { return inflight_by_prefix_[Slot(prefix)].load(); }
  // Restarts the maxima from the operations in flight now.
  void ResetMaxInflight() {
    max_inflight_.store(inflight_.load());
    for (size_t i = 0; i < max_by_prefix_.size(); ++i) {
      max_by_prefix_[i].store(inflight_by_prefix_[i].load());
    }
  }

  // Executions per key (every operation, whatever its result).
  std::unordered_map<std::string, int> Executions() {
    std::lock_guard<std::mutex> lock(exec_mu_);
    return executions_;
  }
  std::vector<std::string> Order() {
    std::lock_guard<std::mutex> lock(exec_mu_);
    return order_;
  }

 private:
  enum class OpKind { kGet, kPut, kRemove };

  static size_t Slot(char c) { return static_cast<unsigned char>(c) % 128; }
  static void RaiseMax(std::atomic<int>& max, int now) {
    int prev = max.load();
    while (now > prev && !max.compare_exchange_weak(prev, now)) {
    }
  }

  struct Scope {
    Scope(TestEngine* e, OpKind kind, std::string_view key)
        : e_(e), slot_(key.empty() ? 0 : Slot(key[0])) {
      RaiseMax(e_->max_inflight_, e_->inflight_.fetch_add(1) + 1);
      RaiseMax(e_->max_by_prefix_[slot_], e_->inflight_by_prefix_[slot_].fetch_add(1) + 1);
      {
        std::unique_lock<std::mutex> lock(e_->gate_mu_);
        e_->gate_cv_.wait(lock, [this] { return e_->gate_open_; });
      }
      if (e_->on_op) e_->on_op(key);
      {
        std::lock_guard<std::mutex> lock(e_->exec_mu_);
        ++e_->executions_[std::string(key)];
        if (e_->record_order.load()) e_->order_.emplace_back(key);
      }
      int64_t delay = 0;
      switch (kind) {
        case OpKind::kGet: e_->gets_.fetch_add(1); delay = e_->get_delay_ns.load(); break;
        case OpKind::kPut: e_->puts_.fetch_add(1); delay = e_->put_delay_ns.load(); break;
        case OpKind::kRemove: e_->removes_.fetch_add(1); delay = e_->put_delay_ns.load(); break;
      }
      if (delay > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(delay));
    }
    ~Scope() {
      e_->inflight_by_prefix_[slot_].fetch_sub(1);
      e_->inflight_.fetch_sub(1);
    }
    TestEngine* e_;
    size_t slot_;
  };

  std::mutex mu_;
  std::map<std::string, std::string> map_;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gate_open_ = true;
  std::mutex exec_mu_;
  std::unordered_map<std::string, int> executions_;
  std::vector<std::string> order_;
  std::atomic<uint64_t> gets_{0}, puts_{0}, removes_{0};
  std::atomic<int> inflight_{0}, max_inflight_{0};
  std::array<std::atomic<int>, 128> inflight_by_prefix_{}, max_by_prefix_{};
};

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_
