// Model-based test of the middleware: for fixed seeds, in caller-runs and hand-off
// execution and with no control, client threads issue a seeded random mix of sync
// Get/Put/Remove/Exists, async Submit, SubmitOrRun and SubmitOrRunPuts groups (values
// on both sides of the batch threshold, explicit class hints and the size rule, a few
// requests on a key the engine fails), while a controller resizes the limits at random
// (SetThreads, PerformAction, 1/1 and max/max) and, in some runs, Stop is called with
// requests in flight. Each client owns its keys, so a std::map per client is an exact
// model of them.
//
// What the middleware promises about order, and all this test assumes: a request's
// engine operation happens after its call begins and before its result is delivered
// (the sync call returns, or the completion runs). Nothing orders two requests in
// flight at once, even of one class and one thread: permits are granted in FIFO order,
// but with a limit above 1 the holders run at once on different threads; an async
// request holding a permit may wait for a worker while a later SubmitOrRun or sync call
// of the same class finds a free permit and runs at once; the classes are independent.
// So a client never has two requests on one key in flight: before using a key it waits
// for the completion of its earlier async request on that key. The result a request
// must give is then the model's at submission, in the client's program order.
//
// Checks: every result matches the model; every accepted request reaches the engine
// exactly once and its completion runs exactly once; a refused request (Overloaded,
// Shutdown) reaches the engine never, its completion never runs, and the model keeps
// its old value; once Stop has returned no operation or completion runs and every call
// is refused with Shutdown; the engine ends equal to the models; Totals (and GetStats,
// when the run fits in one window) count per class the requests that completed, the
// errors and the Overloaded refusals; and per class the operations in the engine at
// once never exceed the limit. A resize moves the limit while requests flow and a
// shrink takes effect as permits come back. With caller-runs the bound for the
// operations in the engine at a moment is the largest limit in force since the latest
// submission among them: each acquired its permit after its own submission, and when
// the last one did, all of them held permits, and a permit is taken only while fewer
// than the limit are in use. With hand-off the limit is the pool: a worker above a
// shrunk target finishes its current request while the others take new ones, so the
// bound is the largest limit since the earliest submission among them. With no control
// it is no_control_max_inflight, both classes together. Each request's
// key carries its class, the resize epoch at its submission and its id; an engine
// wrapper strips them and does the counting in front of the test engine. Meanwhile a
// reader polls the statistics (Totals never go down nor count more than has run).
//
// NVMW_MODEL_SEEDS picks other seeds ("1-500", "7,12,40-60") and NVMW_MODEL_OPS the
// requests per client and run; a failure names its seed and configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "middleware/test_engine.h"
#include "model_test_util.h"
#include "nvmw/middleware.h"
#include "nvmw/stats.h"

namespace nvmw {
namespace {

using testing::TestEngine;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

const std::vector<uint64_t> kDefaultSeeds = {1, 2, 3, 4};

using Rng = ::nvmw::testing::ModelRng;

constexpr uint64_t kThreshold = 256;  // batch_threshold_bytes
const char* const kFailKey = "__fail__";  // TestEngine::fail_key: IOError, never stored
constexpr uint32_t kMaxEpochs = 1 << 16;
constexpr size_t kHeader = 17;  // class tag, 8 hex digits of epoch, 8 of request id

// Failures from any thread, reported by the test's thread at the end.
class Failures {
 public:
  void Add(std::string msg) {
    std::lock_guard<std::mutex> lock(mu_);
    if (msgs_.size() < 20) msgs_.push_back(std::move(msg));
    ++count_;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string s = std::to_string(count_) + " failures:";
    for (const std::string& m : msgs_) s += "\n  " + m;
    return s;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> msgs_;
  size_t count_ = 0;
};

// The bound on each class's operations in the engine during each resize epoch: the
// controller publishes epoch e + 1 (bound max(old, new)) before a resize and e + 2
// (bound new) once it has returned.
struct LimitLog {
  std::atomic<uint32_t> epoch{0};
  std::vector<std::array<int, 2>> bound = std::vector<std::array<int, 2>>(kMaxEpochs);
};

std::string Hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// In front of the test engine: takes the header off each key, counts each request's
// engine operations, and checks the operations in the engine at once per class (or,
// with no control, in all) against the limits. Engine::PutMany's default calls Put per
// item, so a group's puts are counted one by one too.
class CountingEngine : public Engine {
 public:
  CountingEngine(TestEngine* inner, LimitLog* log, Failures* failures, bool control,
                 bool hand_off, int shared_bound, size_t max_requests)
      : inner_(inner), log_(log), failures_(failures), control_(control), hand_off_(hand_off),
        shared_bound_(shared_bound), executions_(max_requests) {}

  using Engine::Get;
  Status Get(std::string_view key, const ValueFn& fn) override {
    Scope s(this, key);
    return s.ok ? inner_->Get(s.real, fn) : Status::InvalidArgument("bad test key");
  }
  Status Put(std::string_view key, std::string_view value) override {
    Scope s(this, key);
    return s.ok ? inner_->Put(s.real, value) : Status::InvalidArgument("bad test key");
  }
  Status Remove(std::string_view key) override {
    Scope s(this, key);
    return s.ok ? inner_->Remove(s.real) : Status::InvalidArgument("bad test key");
  }
  Status Exists(std::string_view key) override {
    Scope s(this, key);
    return s.ok ? inner_->Exists(s.real) : Status::InvalidArgument("bad test key");
  }
  uint64_t Count() override { return inner_->Count(); }
  const char* Name() const override { return "counting"; }

  int executions(uint32_t id) const { return executions_[id].load(); }
  // Operations of class c that have reached the engine.
  uint64_t executed(int c) const { return executed_[c].load(); }
  int max_inflight(int c) {
    std::lock_guard<std::mutex> lock(mu_);
    return max_seen_[c];
  }
  // Set once Stop has returned: nothing may reach the engine after it.
  std::atomic<bool> stopped{false};

 private:
  struct Scope {
    Scope(CountingEngine* e, std::string_view key) : e_(e) {
      if (key.size() <= kHeader || (key[0] != 'I' && key[0] != 'B')) {
        e_->failures_->Add("malformed key reached the engine");
        ok = false;
        return;
      }
      cls_ = key[0] == 'B' ? 1 : 0;
      epoch_ = static_cast<uint32_t>(std::stoul(std::string(key.substr(1, 8)), nullptr, 16));
      const uint32_t id =
          static_cast<uint32_t>(std::stoul(std::string(key.substr(9, 8)), nullptr, 16));
      real = key.substr(kHeader);
      if (id >= e_->executions_.size()) {
        e_->failures_->Add("request id out of range");
        ok = false;
        return;
      }
      if (e_->stopped.load()) {
        e_->failures_->Add("request " + std::to_string(id) + " reached the engine after Stop");
      }
      e_->executions_[id].fetch_add(1);
      e_->executed_[cls_].fetch_add(1);
      std::lock_guard<std::mutex> lock(e_->mu_);
      const int c = e_->control_ ? cls_ : 0;
      e_->stamps_[c].insert(epoch_);
      const int n = static_cast<int>(e_->stamps_[c].size());
      e_->max_seen_[c] = std::max(e_->max_seen_[c], n);
      int allowed = e_->shared_bound_;
      if (e_->control_) {
        allowed = 0;
        const uint32_t now = e_->log_->epoch.load(std::memory_order_acquire);
        const uint32_t since =
            e_->hand_off_ ? *e_->stamps_[c].begin() : *e_->stamps_[c].rbegin();
        for (uint32_t ep = since; ep <= now; ++ep) {
          allowed = std::max(allowed, e_->log_->bound[ep][c]);
        }
      }
      if (n > allowed) {
        e_->failures_->Add(std::string(c == 0 ? "interactive" : "batch") + ": " +
                           std::to_string(n) + " operations in the engine, bound " +
                           std::to_string(allowed) + " (submissions from epoch " +
                           std::to_string(*e_->stamps_[c].begin()) + " to " +
                           std::to_string(*e_->stamps_[c].rbegin()) + ")");
      }
    }
    ~Scope() {
      if (!ok) return;
      std::lock_guard<std::mutex> lock(e_->mu_);
      auto& set = e_->stamps_[e_->control_ ? cls_ : 0];
      set.erase(set.find(epoch_));
    }
    CountingEngine* e_;
    bool ok = true;
    int cls_ = 0;
    uint32_t epoch_ = 0;
    std::string_view real;
  };

  TestEngine* inner_;
  LimitLog* log_;
  Failures* failures_;
  const bool control_;
  const bool hand_off_;
  const int shared_bound_;
  std::vector<std::atomic<int>> executions_;
  std::atomic<uint64_t> executed_[2] = {};
  std::mutex mu_;
  std::multiset<uint32_t> stamps_[2];  // guarded by mu_: epochs of the operations in flight
  int max_seen_[2] = {0, 0};           // guarded by mu_
};

enum class Expect : uint8_t { kOk, kNotFound, kIOError };

const char* ExpectName(Expect e) {
  return e == Expect::kOk ? "OK" : e == Expect::kNotFound ? "NotFound" : "IOError";
}

bool Matches(const Status& s, Expect e) {
  switch (e) {
    case Expect::kOk:
      return s.ok();
    case Expect::kNotFound:
      return s.IsNotFound();
    case Expect::kIOError:
      return s.IsIOError();
  }
  return false;
}

const char* OpName(OpType op) {
  switch (op) {
    case OpType::kGet:
      return "Get";
    case OpType::kPut:
      return "Put";
    case OpType::kRemove:
      return "Remove";
    case OpType::kExists:
      return "Exists";
  }
  return "?";
}

// One request, as the client built it.
struct Record {
  OpType op = OpType::kGet;
  int cls = 0;
  bool async = false;
  std::string what;  // "client 2 op 17 Submit Put t2k5" for messages
  Expect expect = Expect::kOk;
  std::string expect_value;  // a Get that expects OK
  int fate = 0;              // 1 accepted, 2 refused; set by the client after the call
  std::atomic<int> completions{0};
};

struct Config {
  bool control = true;
  Execution execution = Execution::kCallerRuns;
};

struct RunTotals {
  uint64_t requests = 0;
  uint64_t refused = 0;
  uint64_t resizes = 0;
  bool stopped_midway = false;
};

class Run {
 public:
  Run(uint64_t seed, Config config, int ops_per_client)
      : seed_(seed), config_(config), ops_(ops_per_client) {}

  RunTotals Go();

 private:
  static constexpr int kKeys = 10;       // per client
  static constexpr int kIdsPerOp = 8;    // a group takes up to 6 ids

  struct Client {
    int index = 0;
    std::map<std::string, std::string> model;  // real key -> value
    std::mutex mu;
    std::condition_variable cv;
    bool busy[kKeys] = {};  // guarded by mu: an async request on the key is in flight
    uint32_t next_id = 0;
    uint64_t ops[2] = {0, 0}, errors[2] = {0, 0}, overloaded[2] = {0, 0};
    uint64_t requests = 0, refused = 0;
    bool failed = false;
  };

  std::string KeyName(int client, int k) const {
    return "t" + std::to_string(client) + "k" + std::to_string(k);
  }
  int Resolve(OpType op, size_t bytes, RequestClass hint) const {
    if (hint != RequestClass::kAuto) return static_cast<int>(hint);
    return op == OpType::kPut && bytes >= kThreshold ? 1 : 0;
  }
  std::string Wire(int cls, uint32_t id, const std::string& real) const {
    return std::string(1, cls ? 'B' : 'I') + Hex8(log_.epoch.load(std::memory_order_acquire)) +
           Hex8(id) + real;
  }
  // Waits until no async request of the client is in flight on key k (-1: on any key).
  bool WaitIdle(Client& cl, int k) {
    std::unique_lock<std::mutex> lock(cl.mu);
    const auto idle = [&] {
      if (k >= 0) return !cl.busy[k];
      return std::none_of(std::begin(cl.busy), std::end(cl.busy), [](bool b) { return b; });
    };
    if (cl.cv.wait_for(lock, std::chrono::seconds(120), idle)) return true;
    failures_.Add("client " + std::to_string(cl.index) +
                  ": an accepted async request's completion never ran");
    cl.failed = true;
    return false;
  }
  void SetIdle(Client& cl, int k) {
    {
      std::lock_guard<std::mutex> lock(cl.mu);
      cl.busy[k] = false;
    }
    cl.cv.notify_all();
  }
  void SetBusy(Client& cl, int k) {
    std::lock_guard<std::mutex> lock(cl.mu);
    cl.busy[k] = true;
  }
  void Check(const Record& r, const Status& s, const std::string& value) {
    if (!Matches(s, r.expect)) {
      failures_.Add(r.what + ": got " + s.ToString() + ", model says " + ExpectName(r.expect));
    } else if (r.op == OpType::kGet && s.ok() && value != r.expect_value) {
      failures_.Add(r.what + ": got a value of " + std::to_string(value.size()) +
                    " bytes, model has " + std::to_string(r.expect_value.size()));
    }
  }
  // Whether a status is a refusal; anything else than a result or a refusal fails.
  bool Refused(Client& cl, const Record& r, const Status& s, bool stop_returned) {
    if (stop_returned && !s.IsShutdown()) {
      failures_.Add(r.what + ": called after Stop returned, got " + s.ToString());
    }
    if (s.IsShutdown()) {
      if (!stop_called_.load()) failures_.Add(r.what + ": Shutdown before Stop");
      return true;
    }
    if (s.IsOverloaded()) {
      ++cl.overloaded[r.cls];
      return true;
    }
    return false;
  }
  // Model effect of an accepted request on a client key.
  void Apply(Client& cl, OpType op, const std::string& key, const std::string& value) {
    if (key == kFailKey) return;
    if (op == OpType::kPut) cl.model[key] = value;
    if (op == OpType::kRemove) cl.model.erase(key);
  }
  Record* NewRecord(Client& cl, OpType op, int cls, bool async, const std::string& key,
                    const char* how, uint32_t* id) {
    *id = static_cast<uint32_t>(cl.index) * per_client_ids_ + cl.next_id++;
    auto& slot = records_[*id];
    slot = std::make_unique<Record>();
    Record* r = slot.get();
    r->op = op;
    r->cls = cls;
    r->async = async;
    r->what = "client " + std::to_string(cl.index) + " request " + std::to_string(cl.requests) +
              " " + how + " " + OpName(op) + " " + key + (cls ? " (batch)" : " (interactive)");
    if (key == kFailKey) {
      r->expect = op == OpType::kExists ? Expect::kNotFound : Expect::kIOError;
    } else {
      auto it = cl.model.find(key);
      const bool present = it != cl.model.end();
      switch (op) {
        case OpType::kGet:
          r->expect = present ? Expect::kOk : Expect::kNotFound;
          if (present) r->expect_value = it->second;
          break;
        case OpType::kPut:
          r->expect = Expect::kOk;
          break;
        case OpType::kRemove:
        case OpType::kExists:
          r->expect = present ? Expect::kOk : Expect::kNotFound;
          break;
      }
    }
    ++cl.requests;
    return r;
  }
  void Accepted(Client& cl, Record* r) {
    r->fate = 1;
    ++cl.ops[r->cls];
    if (r->expect == Expect::kIOError) ++cl.errors[r->cls];
  }
  std::string Value(Rng& rng, Client& cl) {
    // Sizes on both sides of the threshold, the threshold itself included.
    static constexpr size_t kEdges[] = {0, 1, kThreshold - 1, kThreshold, kThreshold + 1};
    const size_t n = rng.Percent(20) ? kEdges[rng.Below(5)] : rng.Below(4 * kThreshold);
    std::string v(n, '\0');
    const uint64_t stamp = rng.Next();
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>('a' + (stamp >> (i % 60)) % 26);
    if (n >= 8) v.replace(0, 8, Hex8(static_cast<uint32_t>(cl.requests)));
    return v;
  }
  RequestClass Hint(Rng& rng) {
    const uint64_t x = rng.Below(4);
    return x == 0 ? RequestClass::kInteractive : x == 1 ? RequestClass::kBatch : RequestClass::kAuto;
  }

  void ClientMain(Client& cl);
  void OneRequest(Client& cl, Rng& rng);
  void Group(Client& cl, Rng& rng);
  void ControllerMain();
  void ObserverMain();

  const uint64_t seed_;
  const Config config_;
  const int ops_;
  MiddlewareOptions options_;
  int clients_ = 4;
  uint32_t per_client_ids_ = 0;
  Failures failures_;
  LimitLog log_;
  TestEngine inner_;
  std::unique_ptr<CountingEngine> engine_;
  std::vector<std::unique_ptr<Record>> records_;
  std::unique_ptr<Middleware> mw_;
  std::vector<std::unique_ptr<Client>> client_state_;
  std::atomic<bool> stop_called_{false};
  std::atomic<int> clients_done_{0};
  std::atomic<bool> observer_stop_{false};
  std::atomic<int64_t> progress_{0};
  int64_t stop_at_ = -1;  // progress at which the controller calls Stop (-1: at the end)
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  uint64_t resizes_ = 0;
  bool stopped_midway_ = false;
};

void Run::OneRequest(Client& cl, Rng& rng) {
  const uint64_t kind = rng.Below(100);
  if (kind < 10) {
    Group(cl, rng);
    return;
  }
  const bool fail_key = rng.Percent(3);
  const int k = static_cast<int>(rng.Below(kKeys));
  const std::string key = fail_key ? kFailKey : KeyName(cl.index, k);
  if (!fail_key && !WaitIdle(cl, k)) return;
  const OpType op = static_cast<OpType>(rng.Below(4));
  const std::string value = op == OpType::kPut ? Value(rng, cl) : std::string();
  const RequestClass hint = Hint(rng);
  const int cls = Resolve(op, value.size(), hint);
  if (mw_->Classify(op, value.size(), hint) != static_cast<RequestClass>(cls)) {
    failures_.Add("Classify disagrees with the size rule");
  }
  const bool stop_returned = engine_->stopped.load();
  uint32_t id = 0;
  if (kind < 50) {  // synchronous
    Record* r = NewRecord(cl, op, cls, false, key, "sync", &id);
    const std::string wire = Wire(cls, id, key);
    Status s;
    std::string out = "untouched";
    switch (op) {
      case OpType::kGet:
        s = mw_->Get(wire, &out, hint);
        break;
      case OpType::kPut:
        s = mw_->Put(wire, value, hint);
        break;
      case OpType::kRemove:
        s = mw_->Remove(wire, hint);
        break;
      case OpType::kExists:
        s = mw_->Exists(wire, hint);
        break;
    }
    if (Refused(cl, *r, s, stop_returned)) {
      r->fate = 2;
      ++cl.refused;
      if (op == OpType::kGet && out != "untouched") failures_.Add(r->what + ": refused Get wrote *value");
      return;
    }
    Check(*r, s, out);
    Accepted(cl, r);
    Apply(cl, op, key, value);
    return;
  }
  // Asynchronous: Submit or SubmitOrRun.
  const bool submit = kind < 75;
  Record* r = NewRecord(cl, op, cls, true, key, submit ? "Submit" : "SubmitOrRun", &id);
  Request req;
  req.op = op;
  req.key = Wire(cls, id, key);
  req.value = value;
  req.cls = hint;
  if (!fail_key) SetBusy(cl, k);
  Client* client = &cl;
  Completion done = [this, r, client, k, fail_key](const Status& s, std::string&& v) {
    if (r->completions.fetch_add(1) != 0) failures_.Add(r->what + ": completion ran twice");
    if (engine_->stopped.load()) failures_.Add(r->what + ": completion ran after Stop returned");
    Check(*r, s, v);
    if (!s.ok() && !v.empty()) failures_.Add(r->what + ": a failed request delivered a value");
    if (!fail_key) SetIdle(*client, k);
  };
  const Status s = submit ? mw_->Submit(std::move(req), std::move(done))
                          : mw_->SubmitOrRun(std::move(req), std::move(done));
  if (Refused(cl, *r, s, stop_returned)) {
    r->fate = 2;
    ++cl.refused;
    if (!fail_key) SetIdle(cl, k);
    return;
  }
  if (!s.ok()) {
    failures_.Add(r->what + ": " + s.ToString());
    r->fate = 2;
    if (!fail_key) SetIdle(cl, k);
    return;
  }
  Accepted(cl, r);
  Apply(cl, op, key, value);
}

void Run::Group(Client& cl, Rng& rng) {
  const size_t want = 2 + rng.Below(5);
  std::vector<int> keys;  // client key index, or -1 for the failing key
  for (size_t tries = 0; keys.size() < want && tries < 3 * want; ++tries) {
    if (rng.Percent(5)) {
      if (std::find(keys.begin(), keys.end(), -1) == keys.end()) keys.push_back(-1);
      continue;
    }
    const int k = static_cast<int>(rng.Below(kKeys));
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    {
      std::lock_guard<std::mutex> lock(cl.mu);
      if (cl.busy[k]) continue;  // distinct keys with nothing in flight: the group's order is free
    }
    keys.push_back(k);
  }
  const size_t n = keys.size();
  if (n == 0) return;
  const bool stop_returned = engine_->stopped.load();
  std::vector<Request> reqs(n);
  std::vector<Completion> done(n);
  std::vector<Status> accepted(n);
  std::vector<Record*> recs(n);
  std::vector<std::string> names(n), values(n);
  for (size_t i = 0; i < n; ++i) {
    names[i] = keys[i] < 0 ? kFailKey : KeyName(cl.index, keys[i]);
    values[i] = Value(rng, cl);
    const RequestClass hint = Hint(rng);
    const int cls = Resolve(OpType::kPut, values[i].size(), hint);
    uint32_t id = 0;
    recs[i] = NewRecord(cl, OpType::kPut, cls, true, names[i], "SubmitOrRunPuts", &id);
    reqs[i].op = OpType::kPut;
    reqs[i].key = Wire(cls, id, names[i]);
    reqs[i].value = values[i];
    reqs[i].cls = hint;
    const int k = keys[i];
    if (k >= 0) SetBusy(cl, k);
    Record* r = recs[i];
    Client* client = &cl;
    done[i] = [this, r, client, k](const Status& s, std::string&& v) {
      if (r->completions.fetch_add(1) != 0) failures_.Add(r->what + ": completion ran twice");
      if (engine_->stopped.load()) failures_.Add(r->what + ": completion ran after Stop returned");
      Check(*r, s, v);
      if (!v.empty()) failures_.Add(r->what + ": a Put delivered a value");
      if (k >= 0) SetIdle(*client, k);
    };
  }
  const size_t grouped = mw_->SubmitOrRunPuts(reqs.data(), done.data(), n, accepted.data());
  if (grouped > n || grouped == 1) {
    failures_.Add("client " + std::to_string(cl.index) + ": SubmitOrRunPuts of " +
                  std::to_string(n) + " says " + std::to_string(grouped) + " ran together");
  }
  if (grouped != 0 && config_.control && config_.execution == Execution::kHandOff) {
    failures_.Add("SubmitOrRunPuts grouped requests with hand-off");
  }
  for (size_t i = 0; i < n; ++i) {
    Record* r = recs[i];
    if (Refused(cl, *r, accepted[i], stop_returned) || !accepted[i].ok()) {
      if (!accepted[i].ok() && !accepted[i].IsShutdown() && !accepted[i].IsOverloaded()) {
        failures_.Add(r->what + ": " + accepted[i].ToString());
      }
      r->fate = 2;
      ++cl.refused;
      if (keys[i] >= 0) SetIdle(cl, keys[i]);
      continue;
    }
    Accepted(cl, r);
    Apply(cl, OpType::kPut, names[i], values[i]);
  }
}

void Run::ClientMain(Client& cl) {
  Rng rng(seed_ * 1000003 + static_cast<uint64_t>(cl.index) * 7919 + 17);
  int after_stop = 0;  // requests made once Stop has returned: a few are enough
  for (int i = 0; i < ops_ && !cl.failed && after_stop < 20; ++i) {
    if (engine_->stopped.load()) ++after_stop;
    OneRequest(cl, rng);
    if (rng.Percent(1)) WaitIdle(cl, -1);  // now and then nothing in flight
    if (progress_.fetch_add(1) + 1 == stop_at_) {
      {
        std::lock_guard<std::mutex> lock(progress_mu_);
      }
      progress_cv_.notify_all();
    }
  }
  if (!cl.failed) WaitIdle(cl, -1);
  clients_done_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
  }
  progress_cv_.notify_all();
}

void Run::ControllerMain() {
  Rng rng(seed_ * 7 + 3);
  const int max = options_.max_threads;
  int cur[2] = {0, 0};
  mw_->GetThreads(&cur[0], &cur[1]);
  uint32_t epoch = 0;
  std::thread stopper;
  if (stop_at_ >= 0) {
    // Stop comes from a thread of its own, so that it also races the resizes.
    stopper = std::thread([this] {
      {
        std::unique_lock<std::mutex> lock(progress_mu_);
        progress_cv_.wait(lock, [this] {
          return progress_.load() >= stop_at_ || clients_done_.load() == clients_;
        });
      }
      stop_called_.store(true);
      const Status s = mw_->Stop();
      if (!s.ok()) failures_.Add("Stop: " + s.ToString());
      engine_->stopped.store(true);
    });
  }
  while (clients_done_.load() < clients_ && epoch + 2 < kMaxEpochs) {
    const uint64_t pick = rng.Below(10);
    int next[2];
    int action = -1;
    if (pick < 4) {
      action = static_cast<int>(rng.Below(kNumActions));
      std::tie(next[0], next[1]) = ApplyAction(cur[0], cur[1], action, max);
    } else if (pick < 6) {
      next[0] = next[1] = 1;
    } else if (pick < 7) {
      next[0] = next[1] = max;
    } else {
      next[0] = 1 + static_cast<int>(rng.Below(max));
      next[1] = 1 + static_cast<int>(rng.Below(max));
    }
    for (int c = 0; c < 2; ++c) log_.bound[epoch + 1][c] = std::max(cur[c], next[c]);
    log_.epoch.store(++epoch, std::memory_order_release);
    const Status s = action >= 0 ? mw_->PerformAction(action) : mw_->SetThreads(next[0], next[1]);
    if (s.ok()) {
      cur[0] = next[0];
      cur[1] = next[1];
      if (!stop_called_.load()) {
        int got[2] = {0, 0};
        mw_->GetThreads(&got[0], &got[1]);
        if (config_.control && (got[0] != cur[0] || got[1] != cur[1])) {
          failures_.Add("GetThreads " + std::to_string(got[0]) + "/" + std::to_string(got[1]) +
                        " after a resize to " + std::to_string(cur[0]) + "/" +
                        std::to_string(cur[1]));
        }
      }
    } else if (!(s.IsShutdown() && stop_called_.load())) {
      failures_.Add("resize: " + s.ToString());
    }
    for (int c = 0; c < 2; ++c) log_.bound[epoch + 1][c] = cur[c];
    log_.epoch.store(++epoch, std::memory_order_release);
    ++resizes_;
    // Paces the resizes so that requests run between them (not a synchronisation).
    if (rng.Percent(50)) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng.Below(kSanitized ? 2000 : 300)));
    } else {
      std::this_thread::yield();
    }
  }
  if (stopper.joinable()) stopper.join();
}

// Reads the statistics while requests flow: the totals never go down nor count more
// than has reached the engine, windows come in order, limits stay in [1, max_threads].
void Run::ObserverMain() {
  uint64_t last_ops[2] = {0, 0};
  uint64_t last_seq = 0;
  while (!observer_stop_.load()) {
    for (int c = 0; c < 2; ++c) {
      const ClassTotals t = mw_->Totals(static_cast<RequestClass>(c));
      const uint64_t ran = engine_->executed(c);
      if (t.ops < last_ops[c] || t.ops > ran) {
        failures_.Add(std::string(c == 0 ? "interactive" : "batch") + " Totals ops " +
                      std::to_string(t.ops) + " after " + std::to_string(last_ops[c]) + ", with " +
                      std::to_string(ran) + " operations run");
      }
      last_ops[c] = t.ops;
      (void)mw_->QueueLength(static_cast<RequestClass>(c));
    }
    const WindowStats w = mw_->GetStats();
    if (w.seq < last_seq) failures_.Add("GetStats went back to window " + std::to_string(w.seq));
    last_seq = w.seq;
    (void)mw_->GetState();
    int threads[2] = {0, 0};
    mw_->GetThreads(&threads[0], &threads[1]);
    for (int n : threads) {
      if (config_.control && (n < 1 || n > options_.max_threads)) {
        failures_.Add("GetThreads says " + std::to_string(n));
      }
    }
    WindowStats next;
    const Status s = mw_->WaitForWindow(last_seq, 0.002, &next);
    if (!(s.ok() || s.ToString().find("timeout") != std::string::npos ||
          (s.IsShutdown() && stop_called_.load()))) {
      failures_.Add("WaitForWindow: " + s.ToString());
    }
  }
}

RunTotals Run::Go() {
  Rng rng(seed_);
  options_.control = config_.control;
  options_.execution = config_.execution;
  options_.max_threads = kSanitized ? 4 : 6;
  options_.batch_threshold_bytes = kThreshold;
  options_.no_control_max_inflight = 1 + static_cast<int>(rng.Below(3));
  // A small queue makes Overloaded refusals; a large one almost never.
  options_.queue_capacity = rng.Percent(50) ? 1 + rng.Below(4) : 1 << 12;
  options_.spin_ns = rng.Percent(50) ? 0 : 20000;
  // One window for the whole run (GetStats then holds every request), or many.
  const bool one_window = rng.Percent(30);
  options_.window_s = one_window ? 3600 : 0.005;
  options_.queue_sample_s = 0.001;
  clients_ = kSanitized ? 3 : 4;
  // Operations that take a while keep more of them in the engine at once, and make
  // requests wait for permits.
  if (rng.Percent(30)) {
    inner_.get_delay_ns.store(static_cast<int64_t>(rng.Below(20000)));
    inner_.put_delay_ns.store(static_cast<int64_t>(rng.Below(50000)));
  }
  // Odd seeds call Stop while the clients run, at a random point.
  stop_at_ = seed_ % 2 == 1 ? static_cast<int64_t>(rng.Below(clients_ * ops_)) : -1;
  stopped_midway_ = stop_at_ >= 0;
  per_client_ids_ = static_cast<uint32_t>(ops_) * kIdsPerOp;
  const size_t max_requests = static_cast<size_t>(per_client_ids_) * clients_;
  records_.resize(max_requests);
  const int start_i = 1 + static_cast<int>(rng.Below(options_.max_threads));
  const int start_b = 1 + static_cast<int>(rng.Below(options_.max_threads));
  log_.bound[0] = {start_i, start_b};
  SCOPED_TRACE(std::string(!config_.control ? "no control"
                           : config_.execution == Execution::kHandOff ? "hand-off"
                                                                      : "caller-runs") +
               ", start " + std::to_string(start_i) + "/" + std::to_string(start_b) +
               ", queue_capacity " + std::to_string(options_.queue_capacity) +
               ", no_control_max_inflight " + std::to_string(options_.no_control_max_inflight) +
               ", spin_ns " + std::to_string(options_.spin_ns) +
               (one_window ? ", one window" : ", 5 ms windows") + ", delays " +
               std::to_string(inner_.get_delay_ns.load()) + "/" +
               std::to_string(inner_.put_delay_ns.load()) + " ns, " +
               (stop_at_ >= 0 ? "Stop after " + std::to_string(stop_at_) + " requests"
                              : std::string("Stop at the end")));
  engine_ = std::make_unique<CountingEngine>(&inner_, &log_, &failures_, config_.control,
                                             config_.execution == Execution::kHandOff,
                                             options_.no_control_max_inflight, max_requests);
  mw_ = std::make_unique<Middleware>(options_);
  RunTotals totals;
  const Status started = mw_->Start(engine_.get(), start_i, start_b);
  if (!started.ok()) {
    ADD_FAILURE() << "Start: " << started.ToString();
    return totals;
  }
  for (int i = 0; i < clients_; ++i) {
    client_state_.push_back(std::make_unique<Client>());
    client_state_.back()->index = i;
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < clients_; ++i) {
    threads.emplace_back([this, i] { ClientMain(*client_state_[i]); });
  }
  std::thread controller([this] { ControllerMain(); });
  std::thread observer([this] { ObserverMain(); });
  for (std::thread& t : threads) t.join();
  controller.join();
  observer_stop_.store(true);
  observer.join();
  stop_called_.store(true);
  const Status s = mw_->Stop();
  if (!s.ok()) failures_.Add("Stop: " + s.ToString());
  engine_->stopped.store(true);

  // Every accepted request ran once and completed once; no refused one did either.
  for (size_t id = 0; id < records_.size(); ++id) {
    const Record* r = records_[id].get();
    if (r == nullptr) continue;
    const int runs = engine_->executions(static_cast<uint32_t>(id));
    const int completions = r->completions.load();
    if (r->fate == 1 && runs != 1) {
      failures_.Add(r->what + ": accepted, reached the engine " + std::to_string(runs) + " times");
    }
    if (r->fate == 2 && runs != 0) {
      failures_.Add(r->what + ": refused, reached the engine " + std::to_string(runs) + " times");
    }
    if (r->async && r->fate == 1 && completions != 1) {
      failures_.Add(r->what + ": accepted, completion ran " + std::to_string(completions) +
                    " times");
    }
    if (r->fate != 1 && completions != 0) {
      failures_.Add(r->what + ": refused, completion ran " + std::to_string(completions) +
                    " times");
    }
  }
  // The engine holds exactly the models.
  uint64_t model_keys = 0;
  uint64_t ops[2] = {0, 0}, errors[2] = {0, 0}, overloaded[2] = {0, 0};
  for (const auto& cl : client_state_) {
    model_keys += cl->model.size();
    for (const auto& [key, value] : cl->model) {
      std::string got;
      const Status g = static_cast<Engine&>(inner_).Get(key, &got);
      if (!g.ok() || got != value) {
        failures_.Add("after Stop, " + key + ": " + g.ToString() + ", " +
                      std::to_string(got.size()) + " bytes; model has " +
                      std::to_string(value.size()));
      }
    }
    for (int c = 0; c < 2; ++c) {
      ops[c] += cl->ops[c];
      errors[c] += cl->errors[c];
      overloaded[c] += cl->overloaded[c];
    }
    totals.requests += cl->requests;
    totals.refused += cl->refused;
  }
  if (inner_.Count() != model_keys) {
    failures_.Add("after Stop the engine holds " + std::to_string(inner_.Count()) +
                  " keys, the models " + std::to_string(model_keys));
  }
  // The statistics count what completed, per class.
  const WindowStats last = mw_->GetStats();
  for (int c = 0; c < 2; ++c) {
    const RequestClass rc = static_cast<RequestClass>(c);
    const ClassTotals t = mw_->Totals(rc);
    const std::string name = c == 0 ? "interactive" : "batch";
    if (t.ops != ops[c] || t.errors != errors[c] || t.rejected != overloaded[c]) {
      failures_.Add(name + " Totals: ops " + std::to_string(t.ops) + ", errors " +
                    std::to_string(t.errors) + ", rejected " + std::to_string(t.rejected) +
                    "; the clients saw " + std::to_string(ops[c]) + ", " +
                    std::to_string(errors[c]) + ", " + std::to_string(overloaded[c]));
    }
    const ClassStats& w = c == 0 ? last.interactive : last.batch;
    if (one_window && last.seq == 1 && (w.ops != ops[c] || w.rejected != overloaded[c])) {
      failures_.Add(name + " GetStats (the only window): ops " + std::to_string(w.ops) +
                    ", rejected " + std::to_string(w.rejected) + "; the clients saw " +
                    std::to_string(ops[c]) + ", " + std::to_string(overloaded[c]));
    }
    if (ops[c] == 0 && !stopped_midway_) failures_.Add(name + ": no request ran");
  }
  if (failures_.count() != 0) ADD_FAILURE() << failures_.Text();
  totals.resizes = resizes_;
  totals.stopped_midway = stopped_midway_;
  mw_.reset();
  return totals;
}

void RunSeeds(Config config) {
  const std::vector<uint64_t> seeds = ::nvmw::testing::ModelSeeds(kDefaultSeeds);
  ASSERT_FALSE(seeds.empty()) << "NVMW_MODEL_SEEDS names no seed";
  const int ops = ::nvmw::testing::ModelOps(kSanitized ? 1500 : 6000);
  ASSERT_GT(ops, 0) << "NVMW_MODEL_OPS must be positive";
  RunTotals sum;
  int stops = 0;
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Run run(seed, config, ops);
    const RunTotals t = run.Go();
    sum.requests += t.requests;
    sum.refused += t.refused;
    sum.resizes += t.resizes;
    stops += t.stopped_midway;
    if (::testing::Test::HasFailure()) return;  // the first failing seed is enough
  }
  std::printf("%zu seeds: %llu requests (%llu refused), %llu resizes, %d stopped midway\n",
              seeds.size(), static_cast<unsigned long long>(sum.requests),
              static_cast<unsigned long long>(sum.refused),
              static_cast<unsigned long long>(sum.resizes), stops);
}

// With hand-off the pool is the limit: once a shrink has returned, a worker above the
// new target may finish the request it has but take no other. Each worker checked the
// target before its pop, and a shrink between the two let it take a request submitted
// after the shrink had returned, so with a limit of 1 two requests ran at once (the
// model test above found it). Clients keep the interactive class busy while its limit
// moves between max_threads and 1; the bound is the one the model test checks.
TEST(MiddlewareModelTest, HandOffShrinkTakesNoNewRequest) {
  Failures failures;
  LimitLog log;
  TestEngine inner;
  const int kClients = 6;
  const uint32_t kIds = kSanitized ? 60000 : 800000;
  CountingEngine engine(&inner, &log, &failures, true, true, 1, kIds);
  MiddlewareOptions o;
  o.execution = Execution::kHandOff;
  o.max_threads = 4;
  o.window_s = 3600;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  log.bound[0] = {1, 1};
  std::atomic<uint32_t> next_id{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      for (;;) {
        const uint32_t id = next_id.fetch_add(1);
        if (id >= kIds || done.load()) break;
        std::string out;
        const std::string key = "I" + Hex8(log.epoch.load(std::memory_order_acquire)) + Hex8(id) + "k";
        const Status s = mw.Get(key, &out, RequestClass::kInteractive);
        if (!s.IsNotFound()) failures.Add("Get: " + s.ToString());
      }
      done.store(true);
    });
  }
  uint32_t epoch = 0;
  const auto resize = [&](int n) {
    const int old = log.bound[epoch][0];
    log.bound[epoch + 1] = {std::max(old, n), 1};
    log.epoch.store(++epoch, std::memory_order_release);
    const Status s = mw.SetThreads(n, 1);
    if (!s.ok()) failures.Add("SetThreads: " + s.ToString());
    log.bound[epoch + 1] = {n, 1};
    log.epoch.store(++epoch, std::memory_order_release);
  };
  for (int round = 0; !done.load() && epoch + 4 < kMaxEpochs && failures.count() == 0; ++round) {
    resize(o.max_threads);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // pacing only
    resize(1);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  done.store(true);
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(failures.count(), 0u) << failures.Text();
  std::printf("%u requests, %u resizes\n", std::min(next_id.load(), kIds), epoch / 2);
}

TEST(MiddlewareModelTest, CallerRuns) { RunSeeds(Config{true, Execution::kCallerRuns}); }

TEST(MiddlewareModelTest, HandOff) { RunSeeds(Config{true, Execution::kHandOff}); }

// Without control the execution option is ignored: both must behave alike.
TEST(MiddlewareModelTest, NoControl) {
  RunSeeds(Config{false, Execution::kCallerRuns});
  RunSeeds(Config{false, Execution::kHandOff});
}

}  // namespace
}  // namespace nvmw
