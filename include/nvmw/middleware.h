// Middleware: the workload-aware concurrency-control layer (thesis Table 3.1).
//
// Requests are classed (interactive | batch). A class's thread count (thesis Table
// 3.2/3.3, set by Start, SetThreads and PerformAction, resizable while requests flow) is
// its concurrency limit: at most that many of its requests are in the engine at once.
// With the default execution (kCallerRuns) a synchronous call that finds a free permit
// of its class runs the engine operation on the caller's own thread; one that finds
// none waits in the class's bounded FIFO, is handed the next free permit in order, and
// is run by one of the class's worker threads (already running, so the permit does not
// wait for the caller to be scheduled). Async Submit is run by the workers too; callers
// and workers hold the same permits.
// With kHandOff every request goes through the class queue to a worker instead.
// A monitor thread closes a statistics window every `window_s` seconds (GetStats /
// GetState / WaitForWindow).
//
// No-control mode (options.control = false) is the thesis baseline: the same
// caller-runs path with no per-class limit (only `no_control_max_inflight` in all),
// the same monitoring, and async Submit run inline by the caller.
//
// Thread safety: all methods may be called from any thread, except that Start and
// Stop must not race each other. Ownership: the Engine is not owned; it must
// outlive Stop() (for a middleware freed inside one of its own completions, the stop
// that the destructor hands to a thread of its own: see WaitForDeferredStops).
#ifndef NVMW_MIDDLEWARE_H_
#define NVMW_MIDDLEWARE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "nvmw/engine.h"
#include "nvmw/stats.h"
#include "nvmw/status.h"

namespace nvmw {

// kExists asks whether a key exists without copying its value (Engine::Exists): a read
// of 0 value bytes in the window statistics, OK or NotFound.
enum class OpType : uint8_t { kGet = 0, kPut = 1, kRemove = 2, kExists = 3 };

// Who runs a controlled request's engine operation.
enum class Execution : uint8_t {
  // A sync call that finds a free permit runs it on its own thread (no queue, no
  // wake-up); waiting and async requests run on the class's workers. The default:
  // measured cheaper (docs/middleware.md, "Choosing the execution mode").
  kCallerRuns = 0,
  // Every request is queued and run by a worker of its class; the caller waits
  // (the pool size bounds the class's concurrency).
  kHandOff = 1,
};

struct MiddlewareOptions {
  // Upper bound of each pool (thesis Table 3.2 caps threads at 32). Pools stay in [1, max_threads].
  int max_threads = 32;
  // Monitor window length in seconds (thesis: 1 s). Shorter windows for tests/training.
  double window_s = 1.0;
  // false: no-control baseline (callers run operations themselves, bounded below).
  bool control = true;
  // Controlled mode: caller-runs (permits) or hand-off (workers run everything). Leave
  // the default unless comparing the two.
  Execution execution = Execution::kCallerRuns;
  // No-control mode: how many operations may run at once, both classes together
  // (thesis baseline: 200).
  int no_control_max_inflight = 200;
  // Size rule for RequestClass::kAuto: a Put whose value has at least this many bytes
  // is batch; smaller puts, and all gets/removes, are interactive.
  uint64_t batch_threshold_bytes = 64 * 1024;
  // Per-class queue capacity: requests waiting in a class, sync and async alike. A full
  // queue answers Overloaded rather than growing (no bound in no-control mode).
  size_t queue_capacity = 1 << 16;
  // Largest value accepted by Put (InvalidArgument above it).
  uint64_t max_value_bytes = 512ull << 20;
  // Spin this long (ns) before parking when a waiter or idle worker has a free core.
  // 0 disables spinning (e.g. heavily oversubscribed machines).
  int64_t spin_ns = 20000;
  // How often (seconds) the monitor samples queue lengths for ClassStats::queue_len_mean.
  // Capped at a quarter of window_s so every window gets several samples.
  double queue_sample_s = 0.01;
  // CPU niceness (0..19) that batch workers give themselves, so that when the CPU is the
  // contended resource the interactive workers and their clients run first. 0 (the
  // thesis's behaviour) leaves batch workers at the caller's priority. Raising one's own
  // niceness needs no privilege. Measured on 2 cores with 100+100 clients (I2/B1, hand-off,
  // while waiting clients still yielded the CPU): 10 lowered the interactive p99 ~40 % for
  // ~20 % of batch throughput; 19 lowered it ~65 % for ~75 %. Since waiters sleep at once,
  // 19 no longer lowered that p99 and cost 15-40 % of batch throughput (docs/middleware.md).
  int batch_nice = 0;
};

// An asynchronous request. The middleware takes ownership of key and value.
struct Request {
  OpType op = OpType::kGet;
  std::string key;
  std::string value;  // Put only
  RequestClass cls = RequestClass::kAuto;
};

// Called exactly once per accepted request, on a worker thread (or inline in
// no-control mode, and by SubmitOrRun with a free permit). `value` holds the value for
// a successful Get and is empty otherwise (Exists included: its status says whether
// the key exists). Must not block for long: it runs on the worker, holding the
// request's permit until it returns. What it captures is destroyed on that thread
// before the permit goes back, still inside the completion. It must never wait for its
// own middleware: a synchronous call or Stop there returns NotSupported (submit
// instead), and the last reference dropped there (also with the captures) frees the
// middleware on a thread of its own. Nor may it wait for another thread that waits for
// the middleware, or make a synchronous call into a middleware whose completions may
// wait for this one (docs/middleware.md, "Inside a completion").
using Completion = std::function<void(const Status& status, std::string&& value)>;

class Middleware {
 public:
  explicit Middleware(const MiddlewareOptions& options = MiddlewareOptions());
  // Calls Stop(). Inside one of this middleware's own completions (e.g. a completion
  // that held the last std::shared_ptr to it), or on one of its workers, where Stop
  // would wait for this thread, it returns at once instead: the stop, which still
  // completes every accepted request, and the free run on a thread of their own once
  // the completion has returned (WaitForDeferredStops waits for them).
  ~Middleware();
  Middleware(const Middleware&) = delete;
  Middleware& operator=(const Middleware&) = delete;

  // Starts the pools with the given sizes (clamped to [1, max_threads]) and the
  // monitor. InvalidArgument for bad options; in no-control mode the sizes are ignored.
  Status Start(Engine* db, int interactive_threads, int batch_threads);

  // Stops accepting, finishes every accepted request (their completions run), then
  // joins workers and the monitor. Idempotent. NotSupported, doing nothing, when
  // called from inside one of this middleware's own completions (InCompletion) or on
  // one of its workers: the drain would wait for that very thread. Stop it from
  // another thread, or drop the reference (see the destructor).
  Status Stop();

  // Synchronous calls: run the engine operation (on this thread when a permit of the
  // class is free, else on a worker once the request's turn in FIFO order comes; with
  // kHandOff always on a worker), return the engine's status. Waiting is a futex wait, no mutex/condvar. Get fills
  // *value on OK. An OK Put is durable when the engine's Put is.
  // NotSupported, in every mode, when called from inside one of this middleware's
  // completions (InCompletion): that thread holds a permit until the completion
  // returns, and the call could wait for it.
  Status Get(std::string_view key, std::string* value, RequestClass cls = RequestClass::kAuto);
  Status Put(std::string_view key, std::string_view value, RequestClass cls = RequestClass::kAuto);
  Status Remove(std::string_view key, RequestClass cls = RequestClass::kAuto);
  // OK when the key exists, NotFound when not; the value is not copied (nor read, unless
  // the engine verifies checksums on read). A read of 0 bytes in the window statistics;
  // interactive under the size rule.
  Status Exists(std::string_view key, RequestClass cls = RequestClass::kAuto);

  // Asynchronous: OK when accepted (done will run exactly once, on a worker of the
  // class once a permit is free), Overloaded when the class queue is full, Shutdown when not running, InvalidArgument for a bad request
  // (done is not called on a non-OK return; it is destroyed as the call returns, after
  // the call has left the middleware, so it may hold the last reference to it). In
  // no-control mode the request runs inline and may wait for a permit, except from
  // inside one of this middleware's completions: there it runs only if a permit is
  // free, else Overloaded.
  Status Submit(Request request, Completion done);

  // Non-blocking submission for an event loop (the Redis-protocol server): never waits
  // for a permit. Caller-runs: when a permit of the request's class is free, runs the
  // engine operation on the calling thread and calls done inline, before returning;
  // otherwise queues the request in the class's FIFO and done runs later on a worker of
  // the class. Hand-off: as Submit. No control: runs inline when the shared bound has
  // room, else Overloaded (there are no workers to queue for). Return values as Submit
  // (done is not called on a non-OK return).
  Status SubmitOrRun(Request request, Completion done);

  // SubmitOrRun for several Puts at once, for an event loop that gathers the writes of
  // one turn (the Redis-protocol server). Caller-runs or no control, when at least two
  // valid requests share the class of the first valid one and that class has a free
  // permit: the requests of that class run on the calling thread under that one permit,
  // through Engine::PutMany (on the pmem engine
  // one drain and one redo-logged publish per group of keys rather than per key), and
  // their done[i] run inline, in order, before this returns. Each Put counts as one
  // request in the window statistics, with the group's time as its latency. Requests
  // of another class, and all of them when no permit is free or in hand-off mode, go
  // one by one as SubmitOrRun takes them. accepted[i] is what SubmitOrRun would have
  // returned for requests[i]: done[i] is called exactly once when it is OK, never
  // otherwise. A request that is not a Put is InvalidArgument. Returns how many ran
  // together under the one permit (0 when none did: fewer than two, no free permit,
  // hand-off mode, not running).
  size_t SubmitOrRunPuts(Request* requests, Completion* done, size_t n, Status* accepted);

  // Last closed window (seq 0 and zeros before the first window closes).
  WindowStats GetStats() const;
  // The class's requests summed over every window closed since Start (kAuto: both
  // classes), whichever of them a caller of GetStats or WaitForWindow saw.
  ClassTotals Totals(RequestClass cls) const;
  // Thesis Table 3.2 state, taken from the last closed window plus current threads.
  State GetState() const;
  // Blocks until a window with seq > after_seq has closed (or timeout), stores it.
  // Returns Shutdown if stopped, IOError("timeout") on timeout.
  Status WaitForWindow(uint64_t after_seq, double timeout_s, WindowStats* out);

  // Thesis Table 3.3 action 0..8 (InvalidArgument otherwise). Thread counts are
  // clamped to [1, max_threads]; a clamped action is not an error.
  Status PerformAction(int action);
  // Sets both classes' limits and pool sizes (InvalidArgument outside [1, max_threads]).
  // Growing starts workers and admits waiters at once; shrinking retires workers after
  // their current request and takes effect as permits come back.
  Status SetThreads(int interactive, int batch);
  // Current limits (= target pool sizes); 0 and 0 in no-control mode.
  void GetThreads(int* interactive, int* batch) const;

  // Requests of a class waiting (not started): sync callers waiting for a permit and
  // queued async requests.
  size_t QueueLength(RequestClass cls) const;
  // Class a request would get (resolves kAuto by the size rule).
  RequestClass Classify(OpType op, size_t value_bytes, RequestClass hint) const;

  const MiddlewareOptions& options() const;
  bool running() const;
  // Whether the machine has a core to spare for a thread of the caller's that would
  // poll for work rather than sleep (a network loop between two requests): the threads
  // busy in the middleware plus the machine's other runnable threads (the caller's
  // among them), as the monitor samples them every queue_sample_s (the least of its
  // last three samples), are at most the cores. The test the middleware's own idle
  // workers make before they spin.
  bool CoreToSpare() const;
  // Whether the calling thread is running one of this middleware's completions (also
  // nested inside a completion of another middleware). Such a thread must not wait
  // for this middleware: Stop, synchronous calls, and the waiting calls of a
  // generator or replay driving it return NotSupported there; the destructors of
  // this middleware, generator or replay leave their waiting to a thread of their own.
  bool InCompletion() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Waits until every stop that a destructor handed to a thread of its own has finished:
// a Middleware freed inside one of its own completions (stopped, drained and freed),
// and a YcsbGenerator or Replay freed inside a completion of the middleware it drives
// (clients joined, generator or replay freed, with its reference to the middleware).
// Call it before destroying an engine, or a middleware given by raw pointer, that such
// a stop may still use, and before the process exits. OK when none is left (at once
// if there never was one), IOError("timeout") after timeout_s, NotSupported from
// inside any completion (a deferred stop may be waiting for it to return).
Status WaitForDeferredStops(double timeout_s);

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_H_
