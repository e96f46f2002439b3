// YCSB-style workload generator: closed-loop client threads issuing reads,
// updates and inserts against a Middleware (either mode) or an Engine directly,
// with client-side latency measurement (thesis Section 4.1.3).
//
// A run has two phases, as in YCSB: Load() inserts `record_count` records, then
// Run() (or Start/Stop/Join in the background) issues the transaction mix.
// Keys are "user" + decimal FNV-1a-64 hash of the record number (YCSB's hashed
// insert order), so the hot keys of a zipfian distribution are scattered.
//
// Thread safety: one YcsbGenerator is driven from one thread (Load, Start, Stop,
// Join, Results); Stop() may also be called from any other thread. Ownership: a
// generator given a std::shared_ptr<Middleware> shares it (the middleware lives as
// long as the generator); one given a raw Middleware* or Engine* does not own it,
// and the target must outlive the generator. Once the middleware is stopped, each
// client ends at its first Shutdown answer (counted as an error).
//
// Inside a completion of the middleware it drives (Middleware::InCompletion), whose
// thread holds a permit a client may be waiting for, the calls that wait for the
// clients (Load, Start, Join, Results, Run) return NotSupported, and the destructor
// tells the clients to stop and leaves joining them, and freeing the generator (with
// its reference to the middleware), to a thread of its own (WaitForDeferredStops
// waits for it; a middleware given by raw pointer must outlive that).
#ifndef NVMW_YCSB_H_
#define NVMW_YCSB_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/stats.h"
#include "nvmw/status.h"

namespace nvmw {

enum class KeyDistribution : uint8_t {
  kUniform = 0,  // every inserted key equally likely
  kZipfian = 1,  // YCSB's scrambled zipfian (Gray et al. generator, FNV-scrambled)
  kLatest = 2,   // zipfian over recency: the most recently inserted keys are hottest
};

// "uniform" | "zipfian" | "latest" -> *out; InvalidArgument otherwise.
Status ParseKeyDistribution(std::string_view name, KeyDistribution* out);
const char* KeyDistributionName(KeyDistribution d);
// "interactive" | "batch" | "auto" -> *out; InvalidArgument otherwise.
Status ParseRequestClass(std::string_view name, RequestClass* out);

struct YcsbOptions {
  // Records inserted by Load(); the initial key space of Run().
  uint64_t record_count = 1000;
  // Operations issued by Run() over all threads. 0 = no limit (duration_s decides).
  uint64_t operation_count = 1000;
  // Wall-clock limit of Run() in seconds. 0 = no limit (operation_count decides).
  // With both set, whichever is reached first ends the run; with neither, Start fails.
  double duration_s = 0;
  // Operation mix. Each in [0, 1]; they must sum to 1 (within 1e-6).
  double read_proportion = 0.5;
  double update_proportion = 0.5;
  double insert_proportion = 0.0;
  // Which keys reads and updates pick (inserts always add the next new key).
  KeyDistribution distribution = KeyDistribution::kZipfian;
  // Skew of zipfian/latest. YCSB's 0.99; change only to study skew itself.
  double zipfian_constant = 0.99;
  // Bytes written by each update/insert (and by Load).
  uint32_t value_bytes = 128;
  // Closed-loop client threads of Run(); each has at most one request outstanding.
  int threads = 1;
  // Threads of Load(). 0 = same as `threads`.
  int load_threads = 0;
  // Target rate over all threads in ops/s; 0 = as fast as possible. Each thread
  // paces itself at target/threads with a fixed schedule; when paced, latency counts
  // from the scheduled start, so a slow server cannot hide delay (coordinated omission).
  double target_ops_per_s = 0;
  // Class hint of every request sent through a Middleware (ignored for an Engine).
  // YCSB plays the interactive application in the thesis.
  RequestClass request_class = RequestClass::kInteractive;
  // Seed of every random choice (thread t uses a stream derived from seed and t).
  uint64_t seed = 1;
  // > 0: also report p50/p99/throughput per interval of this many seconds (the
  // spread of the p99 over a run, e.g. for the sweep's box plots). 0 = off.
  double interval_s = 0;
};

// Client-side statistics of one operation type (or of all) over a run.
// Latency counts from the request start (or its scheduled start when paced) to
// the return of the synchronous call; histogram percentiles are within 1 %.
struct YcsbOpStats {
  uint64_t ops = 0;        // operations completed (any status)
  uint64_t errors = 0;     // completed with a status other than OK/NotFound
  uint64_t not_found = 0;  // reads that found no value (a key still being inserted)
  double ops_per_s = 0;    // ops / elapsed run time
  double mean_us = 0, min_us = 0, max_us = 0;  // exact
  double p50_us = 0, p99_us = 0, p999_us = 0;  // histogram
};

struct YcsbInterval {
  double start_s = 0;  // since the run started
  uint64_t ops = 0;
  double ops_per_s = 0;
  double p50_us = 0, p99_us = 0, mean_us = 0;
};

struct YcsbResults {
  double elapsed_s = 0;        // Run() wall time: first op to last client finishing
  YcsbOpStats all, read, update, insert;
  std::vector<YcsbInterval> intervals;  // empty unless options.interval_s > 0
  uint64_t records_loaded = 0;  // by Load()
  double load_s = 0;
  std::string first_error;      // text of the first error status seen ("" if none)
};

class YcsbGenerator {
 public:
  // Drives a middleware through its synchronous calls (control or no-control mode).
  YcsbGenerator(const YcsbOptions& options, Middleware* middleware);
  // Same, sharing ownership: the middleware cannot be freed while the generator
  // (or one of its clients) may still call it.
  YcsbGenerator(const YcsbOptions& options, std::shared_ptr<Middleware> middleware);
  // Drives an engine directly (no middleware): the client-side reference.
  YcsbGenerator(const YcsbOptions& options, Engine* engine);
  ~YcsbGenerator();  // Stop() and Join(); inside a completion of the middleware, see above
  YcsbGenerator(const YcsbGenerator&) = delete;
  YcsbGenerator& operator=(const YcsbGenerator&) = delete;

  // Checks the options: InvalidArgument with the offending field otherwise.
  static Status Validate(const YcsbOptions& options);

  // Inserts records 0..record_count-1 with load_threads threads, synchronously.
  // Returns the first error status (the remaining inserts are still attempted).
  // Stop() from another thread ends it early (records_loaded says how many went in).
  // IOError if the operating system refuses a load thread (the ones started are
  // stopped and joined first).
  Status Load();

  // Starts the client threads in the background. InvalidArgument for bad options,
  // NotSupported if already started (a generator runs once), IOError if the
  // operating system refuses a client thread (the clients already started are
  // stopped and joined before it returns; Results then holds what they did).
  Status Start();
  // Asks the clients to finish: each completes its current request and exits.
  // Safe from any thread, any number of times.
  void Stop();
  // Waits for every client thread (they end by op count, duration or Stop()). OK, or
  // NotSupported inside a completion of the middleware (see above).
  Status Join();
  // Statistics of the run so far joined; Load's figures even before Run. Load's
  // figures (records_loaded, load_s, first_error) are filled in even when it returns
  // NotSupported for a run started and not yet joined.
  Status Results(YcsbResults* results) const;
  // Load, Start, Join and Results may be called from different threads; they take
  // turns (a Start during a Load waits for it, then runs).
  // Start + Join + Results.
  Status Run(YcsbResults* results);

  bool running() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An engine that stores nothing and answers at once: Put/Remove return OK, Get
// hands back an empty value. Measures what the client side alone can issue.
std::unique_ptr<Engine> NewNoopEngine();

enum class CapacityTarget : uint8_t {
  kDirect = 0,      // generator -> no-op engine
  kNoControl = 1,   // generator -> middleware (no-control mode) -> no-op engine
  kMiddleware = 2,  // generator -> middleware (queues + pools) -> no-op engine
};

// Runs `options` (no load phase needed) against a no-op engine through `target`
// and stores the client-side figures: the most one generator can issue on this
// machine, so a client limit is never mistaken for a middleware limit.
// `middleware_threads` sizes the interactive pool for kMiddleware (batch pool: 1).
// `cancel`, if given, is polled while the clients run: true stops them early (the
// results cover what ran).
Status MeasureGeneratorCapacity(const YcsbOptions& options, CapacityTarget target,
                                int middleware_threads, YcsbResults* results,
                                const std::atomic<bool>* cancel = nullptr);

}  // namespace nvmw

#endif  // NVMW_YCSB_H_
