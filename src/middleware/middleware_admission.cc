// Admission side of the middleware: validation and classification, the permit path
// (caller-runs and no-control: a sync call with a free permit runs on its own thread),
// the hand-off path (admission gate, enqueue), waking synchronous callers (a futex on
// each task's state word), the async task pool, and calling completions (which thread
// runs which middleware's completion).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "middleware/middleware_impl.h"
#include "util/clock.h"
#include "util/futex.h"
#include "util/spin.h"

namespace nvmw {

namespace {

// The completions this thread is running, innermost first; each frame lives on the
// stack of CallCompletion. Null on a thread that runs none, so a synchronous call
// learns with one thread-local load that it cannot be waiting for itself.
struct CompletionFrame {
  const void* mw;  // the Middleware::Impl whose completion runs
  const CompletionFrame* outer;
};
thread_local const CompletionFrame* tls_completions = nullptr;

// The middleware (its Impl) this thread is a worker of; null on any other thread.
thread_local const void* tls_worker_of = nullptr;

const char* OpName(OpType op) {
  switch (op) {
    case OpType::kGet:
      return "get";
    case OpType::kPut:
      return "put";
    case OpType::kRemove:
      return "remove";
    case OpType::kExists:
      return "exists";
  }
  return "request";
}

// Out of line: only a caller that is inside a completion builds the message.
[[gnu::noinline, gnu::cold]] Status RefuseInsideCompletion(OpType op) {
  return Status::NotSupported(
      std::string(OpName(op)) +
      ": a completion cannot make a synchronous call into its own middleware (it would "
      "wait for a permit or a worker that the thread running the completion may hold); "
      "submit the request instead");
}

}  // namespace

Status ExecuteOp(Engine* db, OpType op, std::string_view key, std::string_view value,
                 std::string* out, uint64_t* bytes) {
  *bytes = 0;
  try {
    switch (op) {
      case OpType::kGet: {
        Status s = db->Get(key, out);
        if (s.ok()) *bytes = out->size();
        return s;
      }
      case OpType::kPut:
        *bytes = value.size();
        return db->Put(key, value);
      case OpType::kRemove:
        return db->Remove(key);
      case OpType::kExists:
        return db->Exists(key);  // no value read: 0 bytes
    }
  } catch (const std::bad_alloc&) {
    return Status::NoSpace("out of memory in engine operation");
  } catch (const std::exception& e) {
    return Status::IOError(std::string("engine threw: ") + e.what());
  }
  return Status::InvalidArgument("unknown operation");
}

// ---- validation and classification ----

RequestClass Middleware::Impl::Resolve(OpType op, size_t value_bytes, RequestClass hint) const {
  if (hint != RequestClass::kAuto) return hint;
  return op == OpType::kPut && value_bytes >= options.batch_threshold_bytes
             ? RequestClass::kBatch
             : RequestClass::kInteractive;
}

Status Middleware::Impl::Invalid(OpType op, size_t value_bytes, RequestClass hint) const {
  if (!ValidOp(op)) {
    return Status::InvalidArgument("unknown operation type " +
                                   std::to_string(static_cast<int>(op)));
  }
  if (!ValidClass(hint)) {
    return Status::InvalidArgument("unknown request class " +
                                   std::to_string(static_cast<int>(hint)));
  }
  if (op == OpType::kPut && value_bytes > options.max_value_bytes) {
    return Status::InvalidArgument("value of " + std::to_string(value_bytes) +
                                   " bytes exceeds max_value_bytes " +
                                   std::to_string(options.max_value_bytes));
  }
  return Status::InvalidArgument("invalid request");  // not reached: Validate saw a fault
}

// ---- async task pool ----

AsyncTask* Middleware::Impl::NewAsyncTask(Request&& request, Completion&& done,
                                          RequestClass cls, int64_t submit_ns) {
  AsyncTask* t = nullptr;
  if (!free_tasks->TryPop(&t)) t = new AsyncTask;
  t->request = std::move(request);
  t->done = std::move(done);
  t->op = t->request.op;
  t->cls = cls;
  t->async = true;
  t->key = t->request.key;
  t->value = t->request.value;
  t->submit_ns = submit_ns;
  return t;
}

void Middleware::Impl::RecycleAsyncTask(AsyncTask* t) {
  t->done = nullptr;  // destroys the callback's captures here, as a delete would
  for (std::string* str : {&t->request.key, &t->request.value}) {
    if (str->capacity() > kKeepStringBytes) {
      std::string().swap(*str);
    } else {
      str->clear();
    }
  }
  if (!free_tasks->TryPush(t)) delete t;
}

void Middleware::Impl::RecycleRefused(AsyncTask* t, Completion* done) {
  *done = std::move(t->done);
  RecycleAsyncTask(t);
}

// ---- enqueue ----

Status Middleware::Impl::Refuse(int c, uint64_t capacity) {
  rejected[c].fetch_add(1, std::memory_order_relaxed);
  return Status::Overloaded(std::string(ClassName(c)) + " queue full (capacity " +
                            std::to_string(capacity) + ")");
}

Status Middleware::Impl::Enqueue(Task* t) {
  const int c = static_cast<int>(t->cls);
  Pool& p = *pools[c];
  if (!p.queue.TryPush(t)) return Refuse(c, p.queue.capacity());
  // Pairs with the parker's seq_cst "asleep, parked++, then LooksEmpty()": either it
  // sees the item or this load sees it parked.
  if (p.parked.load(std::memory_order_seq_cst) > 0) WakeOne(p);
  return Status::OK();
}

void Middleware::Impl::PushReady(Task* t) {
  Pool& p = *pools[static_cast<int>(t->cls)];
  // Never full: every item holds a permit and the queue has room for max_threads + 1.
  while (!p.queue.TryPush(t)) std::this_thread::yield();
  if (p.parked.load(std::memory_order_seq_cst) > 0) WakeOne(p);
}

// ---- waking sync callers ----

void Middleware::Impl::Signal(Task* t) {
  std::atomic<uint32_t>* state = &t->state;
  // After this exchange the caller may return and destroy the task: from here on the
  // state word's address is only a futex key (waking it touches no memory; a later
  // sleeper on the same address sees a spurious wake-up and re-checks).
  if (state->exchange(kDone, std::memory_order_acq_rel) == kParked) FutexWake(state, 1);
}

void Middleware::Impl::CompleteSync(Task* t, Status status) {
  t->status = std::move(status);
  Signal(t);
}

void Middleware::Impl::WaitSync(Task* t) {
  if (t->state.load(std::memory_order_acquire) == kDone) return;
  if (CallerMaySpin()) {
    spinners.fetch_add(1, std::memory_order_relaxed);
    const int64_t deadline = NowNs() + options.spin_ns;
    for (uint32_t i = 1;; ++i) {
      if (t->state.load(std::memory_order_acquire) == kDone) break;
      CpuRelax();
      if ((i & 63) == 0 && NowNs() >= deadline) break;
    }
    spinners.fetch_sub(1, std::memory_order_relaxed);
  }
  uint32_t expected = kPending;
  if (!t->state.compare_exchange_strong(expected, kParked, std::memory_order_acq_rel)) {
    return;  // already kDone
  }
  // A raw futex on the state word itself: sleeps at once (no yielding first, see
  // util/futex.h) and is woken by its own completion only. If the worker's exchange
  // came first the wait returns immediately (the word is no longer kParked).
  while (t->state.load(std::memory_order_acquire) != kDone) FutexWait(&t->state, kParked);
}

// ---- permits ----

StatsShard* Middleware::Impl::CallerStripe() {
  // The stripe index, not the hash, is kept: a modulo by the vector's size was a 64-bit
  // division on every request.
  // Constant-initialised, so reading it needs no thread-local guard check.
  static thread_local size_t stripe = kCallerStripes;
  if (stripe == kCallerStripes) {
    stripe = std::hash<std::thread::id>()(std::this_thread::get_id()) % kCallerStripes;
  }
  return caller_stripes[stripe];
}

void Middleware::Impl::Dispatch(PermitWaiter* granted, Task** run_next) {
  if (granted == nullptr) return;
  // A task pushed here may run, complete and give its permit back before this thread
  // has finished waking a worker, and its completion may drop the last reference: the
  // gate keeps Stop (which waits for it once every permit is back) from freeing the
  // pools under this thread. Workers need no gate (Stop joins them) but take it too;
  // this is the contended path only.
  Gate gate(this);
  while (granted != nullptr) {
    Task* t = static_cast<Task*>(granted);
    granted = granted->next;  // read before handing over: the task may be gone after
    if (!options.control) {
      Signal(t);  // no workers: the caller runs its own request
    } else if (run_next != nullptr && *run_next == nullptr) {
      *run_next = t;
    } else {
      PushReady(t);
    }
  }
}

Status Middleware::Impl::RunOnCaller(Task* t, std::string* out, Status* result,
                                     Completion* done) {
  const int c = static_cast<int>(t->cls);
  switch (PermitsOf(c).Acquire(t, max_waiters)) {
    case Permits::Admit::kGranted:
      break;
    case Permits::Admit::kQueued:
      if (options.control) {
        // The request gets the next free permit in FIFO order and a worker of the class,
        // a thread already running, runs it (records it, completes it, releases the
        // permit). Waking this thread to run it instead would leave the permit idle
        // for a scheduling delay on every hand-over, which on a busy machine is longer
        // than the operation (docs/middleware.md, "Who runs a waiting request").
        WaitSync(t);
        *result = std::move(t->status);
        return Status::OK();
      }
      shared_waiting[c].fetch_add(1, std::memory_order_relaxed);
      WaitSync(t);  // woken holding the permit
      shared_waiting[c].fetch_sub(1, std::memory_order_relaxed);
      break;
    case Permits::Admit::kClosed:
      return Status::Shutdown("middleware is not running");
    case Permits::Admit::kFull:
      return Refuse(c, max_waiters);
  }
  if (done != nullptr) {
    // The completion runs before the permit goes back, so Stop, which waits for every
    // permit, cannot return before it.
    RunInlineHoldingPermit(c, t->op, t->cls, t->key, t->value, t->submit_ns, *done);
    return Status::OK();
  }
  *result = RunSyncHoldingPermit(c, t->op, t->cls, t->key, t->value, out, t->submit_ns);
  return Status::OK();
}

Status Middleware::Impl::RunSyncHoldingPermit(int c, OpType op, RequestClass cls,
                                              std::string_view key, std::string_view value,
                                              std::string* out, int64_t submit_ns) {
  uint64_t bytes = 0;
  Status result = ExecuteOp(db, op, key, value, out, &bytes);
  // Recorded before the permit goes back, so that once Stop sees every permit returned
  // the final window holds every request.
  CallerStripe()->Record(cls, static_cast<uint64_t>(std::max<int64_t>(0, FastNowNs() - submit_ns)),
                         bytes, IsWrite(op), IsError(result));
  ReleasePermit(c, nullptr);
  return result;
}

// ---- completions ----

void Middleware::Impl::CallCompletion(Completion& done, const Status& status,
                                      std::string&& value) {
  const CompletionFrame frame{this, tls_completions};
  tls_completions = &frame;
  try {
    done(status, std::move(value));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvmw: completion threw (ignored): %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nvmw: completion threw (ignored)\n");
  }
  // What the completion captured goes while the frame still says whose completion
  // runs: a captured last reference to this middleware then frees it on a thread of
  // its own (~Middleware), instead of stopping it here, where this thread holds a
  // permit (or is a worker) that the stop would wait for.
  done = nullptr;
  tls_completions = frame.outer;
}

bool Middleware::Impl::InCompletion() const {
  for (const CompletionFrame* f = tls_completions; f != nullptr; f = f->outer) {
    if (f->mw == this) return true;
  }
  return false;
}

bool Middleware::Impl::OnOwnThread() const {
  return tls_worker_of == this || (tls_completions != nullptr && InCompletion());
}

void Middleware::Impl::MarkWorkerThread() { tls_worker_of = this; }

bool ThreadInAnyCompletion() { return tls_completions != nullptr; }

// ---- front door ----

Status Middleware::Impl::SyncCall(OpType op, std::string_view key, std::string_view value,
                                  std::string* out, RequestClass hint) {
  Status s = Validate(op, value.size(), hint);
  if (!s.ok()) return s;
  // Inside one of this middleware's completions the thread holds a permit (with
  // hand-off, it is a worker) until the completion returns. Waiting for a permit or
  // a worker could wait for itself: certainly for a class of limit 1, and across
  // classes when a completion of each waits for the other's (docs/middleware.md,
  // "Inside a completion"). In every mode: without control the completion holds one
  // of the shared permits.
  if (tls_completions != nullptr && InCompletion()) return RefuseInsideCompletion(op);
  const int64_t submit_ns = FastNowNs();
  const RequestClass cls = Resolve(op, value.size(), hint);
  // A free permit (and nobody waiting for one: TryAcquire never lets a newcomer
  // overtake a waiter) runs the request here and now, with nothing built for waiting:
  // the common case at low load, kept as short as the engine call allows.
  if (UsesPermits() && PermitsOf(static_cast<int>(cls)).TryAcquire() == Permits::Admit::kGranted) {
    return RunSyncHoldingPermit(static_cast<int>(cls), op, cls, key, value, out, submit_ns);
  }
  Task t;
  t.submit_ns = submit_ns;
  t.op = op;
  t.cls = cls;
  t.key = key;
  t.value = value;
  t.get_out = out;
  if (UsesPermits()) {
    Status result;
    s = RunOnCaller(&t, out, &result);
    return s.ok() ? std::move(result) : s;
  }
  {
    Gate gate(this);
    if (!gate.open) return Status::Shutdown("middleware is not running");
    s = Enqueue(&t);
    if (!s.ok()) return s;
  }
  WaitSync(&t);
  return std::move(t.status);
}

Status Middleware::Impl::Submit(Request&& request, Completion&& done) {
  Status s = Validate(request.op, request.value.size(), request.cls);
  if (!s.ok()) return s;
  if (!done) return Status::InvalidArgument("Submit needs a completion callback");
  const int64_t submit_ns = FastNowNs();
  const RequestClass cls = Resolve(request.op, request.value.size(), request.cls);
  if (!options.control) {
    // Inside one of this middleware's own completions, waiting for a permit could wait
    // for the one this thread holds: run it only if a permit is free (Overloaded
    // otherwise), as SubmitOrRun does.
    if (tls_completions != nullptr && InCompletion()) {
      return SubmitOrRun(std::move(request), std::move(done));
    }
    // No control: the caller runs it inline, like a sync call.
    Task t;
    t.submit_ns = submit_ns;
    t.op = request.op;
    t.cls = cls;
    t.key = request.key;
    t.value = request.value;
    std::string unused;
    Status result;
    return RunOnCaller(&t, &unused, &result, &done);
  }
  // Before Start there is no task pool to draw from.
  if (!started.load(std::memory_order_acquire)) {
    return Status::Shutdown("middleware is not running");
  }
  const int c = static_cast<int>(cls);
  if (options.execution == Execution::kHandOff) {
    // Admission first: a stopped middleware takes nothing.
    Gate gate(this);
    if (!gate.open) return Status::Shutdown("middleware is not running");
    AsyncTask* t = NewAsyncTask(std::move(request), std::move(done), cls, submit_ns);
    s = Enqueue(t);
    if (!s.ok()) RecycleRefused(t, &done);
    return s;
  }
  // The gate covers the push and the wake-up after it: the task may run and its
  // completion drop the last reference before this thread returns (see Dispatch).
  Gate gate(this);
  if (!gate.open) return Status::Shutdown("middleware is not running");
  AsyncTask* t = NewAsyncTask(std::move(request), std::move(done), cls, submit_ns);
  bool granted = false;
  s = AcquireAsync(c, t, &granted, &done);
  if (granted) PushReady(t);
  return s;
}

Status Middleware::Impl::AcquireAsync(int c, AsyncTask* t, bool* granted, Completion* done) {
  switch (permits[c].Acquire(t, max_waiters)) {
    case Permits::Admit::kGranted:
      *granted = true;
      return Status::OK();
    case Permits::Admit::kQueued:
      return Status::OK();  // a released permit will bring it to the workers
    case Permits::Admit::kClosed:
      RecycleRefused(t, done);
      return Status::Shutdown("middleware is not running");
    case Permits::Admit::kFull:
      break;
  }
  RecycleRefused(t, done);
  return Refuse(c, max_waiters);
}

void Middleware::Impl::RunInlineHoldingPermit(int c, OpType op, RequestClass cls,
                                              std::string_view key, std::string_view value,
                                              int64_t submit_ns, Completion& done,
                                              AsyncTask* recycle) {
  uint64_t bytes = 0;
  std::string out;
  Status result = ExecuteOp(db, op, key, value, &out, &bytes);
  // Recorded before the permit goes back (Stop's drain, as in RunOnCaller).
  CallerStripe()->Record(cls, static_cast<uint64_t>(std::max<int64_t>(0, FastNowNs() - submit_ns)),
                         bytes, IsWrite(op), IsError(result));
  if (!result.ok()) out.clear();
  CallCompletion(done, result, std::move(out));
  // Also before the permit goes back: once every permit is back, a stop handed to
  // another thread (the completion dropped the last reference) may free this.
  if (recycle != nullptr) RecycleAsyncTask(recycle);
  ReleasePermit(c, nullptr);
}

Status Middleware::Impl::SubmitOrRun(Request&& request, Completion&& done) {
  if (options.control && options.execution == Execution::kHandOff) {
    return Submit(std::move(request), std::move(done));
  }
  Status s = Validate(request.op, request.value.size(), request.cls);
  if (!s.ok()) return s;
  if (!done) return Status::InvalidArgument("SubmitOrRun needs a completion callback");
  if (!started.load(std::memory_order_acquire)) {
    return Status::Shutdown("middleware is not running");
  }
  const int64_t submit_ns = FastNowNs();
  const RequestClass cls = Resolve(request.op, request.value.size(), request.cls);
  const int c = static_cast<int>(cls);
  if (!options.control) {
    switch (PermitsOf(c).TryAcquire()) {
      case Permits::Admit::kGranted:
        break;
      case Permits::Admit::kClosed:
        return Status::Shutdown("middleware is not running");
      default:  // nothing queues here: every shared permit is running a request
        rejected[c].fetch_add(1, std::memory_order_relaxed);
        return Status::Overloaded("no free permit: all " +
                                  std::to_string(options.no_control_max_inflight) +
                                  " requests no control runs at once are in flight");
    }
    RunInlineHoldingPermit(c, request.op, cls, request.key, request.value, submit_ns, done);
    return Status::OK();
  }
  // The fast path takes a free permit without building a task; a queued request needs
  // one that outlives this call.
  switch (permits[c].TryAcquire()) {
    case Permits::Admit::kGranted:
      RunInlineHoldingPermit(c, request.op, cls, request.key, request.value, submit_ns, done);
      return Status::OK();
    case Permits::Admit::kClosed:
      return Status::Shutdown("middleware is not running");
    default:
      break;
  }
  AsyncTask* t = NewAsyncTask(std::move(request), std::move(done), cls, submit_ns);
  bool granted = false;
  s = AcquireAsync(c, t, &granted, &done);
  if (granted) {
    // A permit came free between the two attempts: run it here all the same.
    RunInlineHoldingPermit(c, t->op, cls, t->key, t->value, submit_ns, t->done, t);
  }
  return s;
}

size_t Middleware::Impl::SubmitOrRunPuts(Request* requests, Completion* done, size_t n,
                                         Status* accepted) {
  // A completion run here (the group's, or one run by SubmitOrRun) may drop the last
  // reference, and the stop handed to a thread of its own frees the middleware once
  // every permit is back, while this call still has requests to take. The gate, which
  // the stop waits for, keeps it until this call is done.
  std::optional<Gate> gate;
  if (n > 1) gate.emplace(this);
  // Which requests join the group: valid Puts of the first valid one's class.
  // (Not thread_local: a completion may call this again on the same thread.)
  std::vector<size_t> members;
  std::vector<KeyValue> items;
  std::vector<Status> results;
  int c = -1;
  const bool grouping = n > 1 && !(options.control && options.execution == Execution::kHandOff);
  for (size_t i = 0; i < n; ++i) {
    accepted[i] = Status::OK();
    if (requests[i].op != OpType::kPut) {
      accepted[i] = Status::InvalidArgument("SubmitOrRunPuts takes Puts only");
      continue;
    }
    if (!grouping) continue;
    const Request& r = requests[i];
    if (!Validate(r.op, r.value.size(), r.cls).ok() || !done[i]) continue;  // said below
    const int rc = static_cast<int>(Resolve(r.op, r.value.size(), r.cls));
    if (c < 0) c = rc;
    if (rc == c) members.push_back(i);
  }
  bool granted = false;
  if (members.size() > 1 && started.load(std::memory_order_acquire)) {
    granted = PermitsOf(c).TryAcquire() == Permits::Admit::kGranted;
  }
  if (!granted) members.clear();
  if (granted) {
    const int64_t submit_ns = FastNowNs();
    items.reserve(members.size());
    results.assign(members.size(), Status::OK());
    for (size_t i : members) items.push_back(KeyValue{requests[i].key, requests[i].value});
    try {
      db->PutMany(items.data(), items.size(), results.data());
    } catch (const std::bad_alloc&) {
      results.assign(members.size(), Status::NoSpace("out of memory in engine operation"));
    } catch (const std::exception& e) {
      results.assign(members.size(), Status::IOError(std::string("engine threw: ") + e.what()));
    }
    const uint64_t latency_ns = static_cast<uint64_t>(std::max<int64_t>(0, FastNowNs() - submit_ns));
    const RequestClass cls = static_cast<RequestClass>(c);
    StatsShard* stripe = CallerStripe();
    // Recorded, and the completions run, before the permit goes back (as for one
    // request: Stop's drain waits for the permit).
    for (size_t k = 0; k < members.size(); ++k) {
      stripe->Record(cls, latency_ns, items[k].value.size(), true, IsError(results[k]));
    }
    for (size_t k = 0; k < members.size(); ++k) {
      CallCompletion(done[members[k]], results[k], std::string());
    }
    ReleasePermit(c, nullptr);
  }
  // Everything else, one by one (members is sorted: a merge walk skips the group).
  size_t next_member = 0;
  for (size_t i = 0; i < n; ++i) {
    if (next_member < members.size() && members[next_member] == i) {
      ++next_member;
      continue;
    }
    if (!accepted[i].ok()) continue;
    accepted[i] = SubmitOrRun(std::move(requests[i]), std::move(done[i]));
  }
  return members.size();
}

// ---- public entry points of this role ----

Status Middleware::Get(std::string_view key, std::string* value, RequestClass cls) {
  if (value == nullptr) return Status::InvalidArgument("Get needs an output string");
  return impl_->SyncCall(OpType::kGet, key, {}, value, cls);
}

Status Middleware::Put(std::string_view key, std::string_view value, RequestClass cls) {
  return impl_->SyncCall(OpType::kPut, key, value, nullptr, cls);
}

Status Middleware::Remove(std::string_view key, RequestClass cls) {
  return impl_->SyncCall(OpType::kRemove, key, {}, nullptr, cls);
}

Status Middleware::Exists(std::string_view key, RequestClass cls) {
  return impl_->SyncCall(OpType::kExists, key, {}, nullptr, cls);
}

Status Middleware::Submit(Request request, Completion done) {
  return impl_->Submit(std::move(request), std::move(done));
}

Status Middleware::SubmitOrRun(Request request, Completion done) {
  return impl_->SubmitOrRun(std::move(request), std::move(done));
}

size_t Middleware::SubmitOrRunPuts(Request* requests, Completion* done, size_t n,
                                   Status* accepted) {
  return impl_->SubmitOrRunPuts(requests, done, n, accepted);
}

bool Middleware::InCompletion() const { return impl_->InCompletion(); }

RequestClass Middleware::Classify(OpType op, size_t value_bytes, RequestClass hint) const {
  if (!Impl::ValidClass(hint) || !Impl::ValidOp(op)) return RequestClass::kAuto;
  return impl_->Resolve(op, value_bytes, hint);
}

}  // namespace nvmw
