// Admission side of the middleware: validation and classification, the admission gate,
// enqueue, completion of synchronous calls (futex wake words), the async task pool, and
// the no-control path where callers run operations themselves.
#include <algorithm>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "middleware/middleware_impl.h"
#include "util/clock.h"
#include "util/spin.h"

namespace nvmw {

namespace {

// Futex words for parked synchronous callers. A caller's task lives on its stack and
// dies the moment the caller sees kDone, so the worker must not notify on the task
// itself; it notifies one of these static words instead (chosen by task address), which
// outlive every task. Two callers sharing a word only cost a spurious wake-up.
struct alignas(64) WakeWord {
  std::atomic<uint32_t> seq{0};
};
constexpr size_t kWakeWords = 256;
WakeWord g_wake_words[kWakeWords];

std::atomic<uint32_t>& CallerWakeWord(const void* task) {
  uintptr_t h = reinterpret_cast<uintptr_t>(task);
  h ^= h >> 7;
  h ^= h >> 17;
  return g_wake_words[(h >> 4) % kWakeWords].seq;
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

Status Middleware::Impl::Validate(OpType op, size_t value_bytes, RequestClass hint) const {
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
  return Status::OK();
}

// ---- async task pool ----

AsyncTask* Middleware::Impl::NewAsyncTask() {
  AsyncTask* t = nullptr;
  if (free_tasks->TryPop(&t)) return t;
  return new AsyncTask;
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

// ---- enqueue ----

Status Middleware::Impl::Enqueue(Task* t) {
  const int c = static_cast<int>(t->cls);
  Pool& p = *pools[c];
  if (!p.queue.TryPush(t)) {
    rejected[c].fetch_add(1, std::memory_order_relaxed);
    return Status::Overloaded(std::string(ClassName(c)) + " queue full (capacity " +
                              std::to_string(p.queue.capacity()) + ")");
  }
  // Pairs with the parker's seq_cst "asleep, parked++, then LooksEmpty()": either it
  // sees the item or this load sees it parked.
  if (p.parked.load(std::memory_order_seq_cst) > 0) WakeOne(p);
  return Status::OK();
}

// ---- sync completion ----

void Middleware::Impl::CompleteSync(Task* t, Status status) {
  t->status = std::move(status);
  std::atomic<uint32_t>& word = CallerWakeWord(t);
  if (t->state.exchange(kDone, std::memory_order_acq_rel) == kParked) {
    word.fetch_add(1, std::memory_order_seq_cst);
    word.notify_all();
  }
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
  std::atomic<uint32_t>& word = CallerWakeWord(t);
  for (;;) {
    const uint32_t seq = word.load(std::memory_order_seq_cst);
    if (t->state.load(std::memory_order_acquire) == kDone) return;
    word.wait(seq, std::memory_order_seq_cst);
  }
}

// ---- no-control mode ----

StatsShard* Middleware::Impl::CallerStripe() {
  static thread_local const size_t h = std::hash<std::thread::id>()(std::this_thread::get_id());
  return caller_stripes[h % caller_stripes.size()];
}

Status Middleware::Impl::RunInline(OpType op, RequestClass cls, std::string_view key,
                                   std::string_view value, std::string* out,
                                   int64_t submit_ns) {
  const int c = static_cast<int>(cls);
  waiting[c].fetch_add(1, std::memory_order_relaxed);
  inflight->acquire();
  waiting[c].fetch_sub(1, std::memory_order_relaxed);
  uint64_t bytes = 0;
  Status s = ExecuteOp(db, op, key, value, out, &bytes);
  inflight->release();
  CallerStripe()->Record(cls, static_cast<uint64_t>(std::max<int64_t>(0, NowNs() - submit_ns)),
                         bytes, op != OpType::kGet, IsError(s));
  return s;
}

// ---- front door ----

Status Middleware::Impl::SyncCall(OpType op, std::string_view key, std::string_view value,
                                  std::string* out, RequestClass hint) {
  Status s = Validate(op, value.size(), hint);
  if (!s.ok()) return s;
  const int64_t submit_ns = NowNs();
  Task t;
  t.op = op;
  t.cls = Resolve(op, value.size(), hint);
  if (!options.control) {
    Gate gate(this);
    if (!gate.open) return Status::Shutdown("middleware is not running");
    return RunInline(op, t.cls, key, value, out, submit_ns);
  }
  t.key = key;
  t.value = value;
  t.get_out = out;
  t.submit_ns = submit_ns;
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
  const int64_t submit_ns = NowNs();
  const RequestClass cls = Resolve(request.op, request.value.size(), request.cls);
  if (!options.control) {
    Gate gate(this);
    if (!gate.open) return Status::Shutdown("middleware is not running");
    std::string value;
    s = RunInline(request.op, cls, request.key, request.value, &value, submit_ns);
    if (!s.ok()) value.clear();
    done(s, std::move(value));
    return Status::OK();
  }
  // Admission first: before Start there is no task pool to draw from.
  Gate gate(this);
  if (!gate.open) return Status::Shutdown("middleware is not running");
  AsyncTask* t = NewAsyncTask();
  t->request = std::move(request);
  t->done = std::move(done);
  t->op = t->request.op;
  t->cls = cls;
  t->async = true;
  t->key = t->request.key;
  t->value = t->request.value;
  t->submit_ns = submit_ns;
  s = Enqueue(t);
  if (!s.ok()) RecycleAsyncTask(t);
  return s;
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

Status Middleware::Submit(Request request, Completion done) {
  return impl_->Submit(std::move(request), std::move(done));
}

RequestClass Middleware::Classify(OpType op, size_t value_bytes, RequestClass hint) const {
  if (!Impl::ValidClass(hint) || !Impl::ValidOp(op)) return RequestClass::kAuto;
  return impl_->Resolve(op, value_bytes, hint);
}

}  // namespace nvmw
