// TestEngine: an in-memory Engine for the middleware tests, with injectable per-op
// delays, a gate that blocks operations until opened, a failure key, and counters
// (calls per op, operations in flight and their maximum, executions per key).
#ifndef NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_
#define NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
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

  struct Scope {
    Scope(TestEngine* e, OpKind kind, std::string_view key) : e_(e) {
      const int now = e_->inflight_.fetch_add(1) + 1;
      int prev = e_->max_inflight_.load();
      while (now > prev && !e_->max_inflight_.compare_exchange_weak(prev, now)) {
      }
      {
        std::unique_lock<std::mutex> lock(e_->gate_mu_);
        e_->gate_cv_.wait(lock, [this] { return e_->gate_open_; });
      }
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
    ~Scope() { e_->inflight_.fetch_sub(1); }
    TestEngine* e_;
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
};

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_MIDDLEWARE_TEST_ENGINE_H_
