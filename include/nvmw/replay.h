// Serverless Trace Replay: N client threads issue the records of a Trace through a
// Middleware at their scheduled times (open loop), as the thesis's replay tool did
// with serverless functions. Latency counts from the SCHEDULED time, so a client
// that falls behind cannot hide the delay (no coordinated omission).
//
// Schedule: record i of the trace is due at time_us[i] / accel after Start (plus the
// loop offset when looping). Clients take records in order from a shared cursor,
// sleep until the record is due, issue it synchronously, and take the next one; so
// at most `threads` requests of one replay are in flight, like `threads` functions.
//
// Values are generated content of the record's size, cut from one preallocated
// buffer (no allocation per request on the client side). Before timing starts the
// replay can preload every key that it will read, so reads hit data.
//
// Thread safety: Start/Stop/Join/Run may be called from any thread but not
// concurrently with each other, except Stop, which may be called at any time from
// any thread (also from a signal-free watchdog or while Join waits). Progress
// getters may be called at any time. Ownership: started with a
// std::shared_ptr<Middleware>, the replay shares the middleware until it is started
// again or destroyed; started with a raw Middleware*, it does not own it and the
// middleware must outlive Join. A middleware stopped under a running replay ends it
// (clients stop at their first Shutdown answer).
//
// Inside a completion of the middleware it drives (Middleware::InCompletion), whose
// thread holds a permit a client may be waiting for, Start (with that middleware),
// Join and Run return NotSupported, and the destructor tells the clients to stop and
// leaves joining them, and freeing the replay (with its reference to the middleware),
// to a thread of its own (WaitForDeferredStops waits for it; a middleware given by
// raw pointer must outlive that).
#ifndef NVMW_REPLAY_H_
#define NVMW_REPLAY_H_

#include <cstdint>
#include <memory>

#include "nvmw/middleware.h"
#include "nvmw/stats.h"
#include "nvmw/status.h"
#include "nvmw/trace.h"

namespace nvmw {

struct ReplayOptions {
  // Client threads (concurrent serverless functions). Thesis: 100-400.
  int threads = 16;
  // Class hint passed with every request (kAuto lets the middleware's size rule decide).
  RequestClass cls = RequestClass::kInteractive;
  // Pace acceleration: offsets are divided by this (2 = twice as fast). > 0.
  double accel = 1.0;
  // After the last record, start over from the first (same keys), shifted by the
  // trace span plus one mean inter-arrival gap, until duration_s or Stop().
  bool loop = false;
  // Stop issuing after this many seconds from Start (0 = no limit: one pass, or
  // until Stop() when looping). Requests in flight complete and are counted.
  double duration_s = 0;
  // Write every key the trace reads before the timed part starts (not timed, not
  // counted in the result). Leave on unless the store already holds the keys.
  bool preload = true;
  // Threads used by the preload (it is a bulk load, not part of the experiment).
  int preload_threads = 4;
  // Value content seed (content is not checked; it only keeps values non-trivial).
  uint64_t seed = 0;
  // Largest request size replayed (0 = the middleware's max_value_bytes). Start
  // refuses a trace with a larger record before allocating its value buffer; the
  // middleware's max_value_bytes always applies as well.
  uint64_t max_value_bytes = 0;
};

// Latency distribution of one operation kind, microseconds.
struct ReplayOpStats {
  uint64_t ops = 0;        // completed (any status)
  uint64_t errors = 0;     // non-OK status other than NotFound (Overloaded included)
  uint64_t not_found = 0;  // reads of a missing key (0 after a preload)
  uint64_t bytes = 0;      // value bytes moved by successful ops
  // From the scheduled time to completion (what the function would see).
  double p50_us = 0, p99_us = 0, p999_us = 0, mean_us = 0, max_us = 0;
  // From the issue time to completion (the middleware's share, for comparison).
  double service_p50_us = 0, service_p99_us = 0, service_mean_us = 0;
};

struct ReplayResult {
  ReplayOpStats read, write, all;
  double elapsed_s = 0;      // Start to the last completion
  double ops_per_s = 0;      // all.ops / elapsed_s
  double bytes_per_s = 0;
  uint64_t errors = 0;       // all.errors
  uint64_t passes = 0;       // how many times the trace started (1 without loop)
  // How late clients issued records (issue - scheduled): large values mean too few
  // client threads for the offered load (the latency above includes this lag).
  double lag_p50_us = 0, lag_p99_us = 0;
  uint64_t preloaded_keys = 0;
  double preload_s = 0;
  double offered_ops_per_s = 0;  // the schedule's rate (records / span * accel)
  bool stopped = false;          // ended by Stop() or duration_s rather than by the trace
};

class Replay {
 public:
  // Copies nothing the caller must keep: the trace is moved/copied in.
  // Options are checked by Start (InvalidArgument).
  Replay(Trace trace, const ReplayOptions& options);
  ~Replay();  // Stop() + Join(); inside a completion of the middleware, see above
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  // Preloads (if asked and not yet done for this Replay), then starts the clients in
  // the background and returns. InvalidArgument for bad options or an empty trace;
  // the preload's first error otherwise; Shutdown when Stop() ended the preload
  // (it is redone by the next Start); IOError when the operating system refuses a
  // client thread (the clients already started are stopped and joined first);
  // NotSupported inside a completion of mw (see above). A finished replay (after
  // Join) may be started again: the schedule restarts at 0 and the result is reset;
  // the preload is not repeated.
  Status Start(Middleware* mw);
  // Same, sharing ownership of the middleware (kept until the next Start or ~Replay).
  Status Start(std::shared_ptr<Middleware> mw);
  // Asks clients to stop issuing; requests in flight complete. Non-blocking.
  void Stop();
  // Waits until every client has finished and stores the result. NotSupported
  // (result untouched) inside a completion of the middleware the clients drive.
  Status Join(ReplayResult* result);
  // Start + Join.
  Status Run(Middleware* mw, ReplayResult* result);
  Status Run(std::shared_ptr<Middleware> mw, ReplayResult* result);

  bool running() const;
  // Records issued / completed since the last Start (approximate while running).
  uint64_t issued() const;
  uint64_t completed() const;
  // The schedule's rate in records per second (trace records / span * accel).
  double OfferedOpsPerSecond() const;
  const Trace& trace() const;
  const ReplayOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmw

#endif  // NVMW_REPLAY_H_
