// Traces: an ordered list of storage accesses {time offset, read|write, key, bytes}
// read from the Azure Functions Blob 2020 CSV or from nvmw's native CSV, written
// back, synthesised (Azure-like interactive, Wukong-SVD-like batch), summarised,
// filtered and transformed. Replaying a trace is in nvmw/replay.h.
//
// Formats (docs/workloads-trace.md has the details):
//   azure  - the released file: header row and 11 columns
//            Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,
//            AnonBlobName,BlobType,AnonBlobETag,BlobBytes,Read,Write
//            key = AnonBlobName, bytes = BlobBytes (empty -> 0), op from Read/Write.
//            Rows may be in any order; readers sort them by Timestamp (stable).
//   native - header `time_ms,op,key,bytes`; time_ms a decimal offset in ms (>= 0),
//            op read|write (also r|w|get|put, any case), bytes an integer.
//            Blank lines and lines starting with '#' are ignored.
//
// Thread safety: all functions are pure (no shared state); a Trace is a value.
#ifndef NVMW_TRACE_H_
#define NVMW_TRACE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "nvmw/status.h"

namespace nvmw {

// The longest schedule a trace, a synthetic trace or a replay may span, seconds (about
// 31 years). Trace time is int64 microseconds and replay time int64 nanoseconds (2^63 ns
// is about 292 years); a schedule past either would wrap to negative times, so longer
// ones are refused.
inline constexpr double kMaxScheduleS = 1e9;

enum class TraceOp : uint8_t { kRead = 0, kWrite = 1 };

struct TraceRecord {
  int64_t time_us = 0;  // offset from the first record of the trace, microseconds
  TraceOp op = TraceOp::kRead;
  std::string key;
  uint64_t bytes = 0;   // value size (Azure: BlobBytes rounded; empty BlobBytes -> 0)
};

struct Trace {
  // Sorted by time_us (ties keep file order). Azure traces start at offset 0 (the
  // earliest Timestamp); native traces keep the offsets written in the file.
  std::vector<TraceRecord> records;
  // Absolute time of offset 0 in ms since 1970 (Azure); 0 for native traces.
  int64_t origin_unix_ms = 0;
  // Rows dropped as malformed (TraceReadOptions::skip_malformed), and the message
  // of the first one, so a caller can tell the user what was wrong.
  uint64_t skipped_rows = 0;
  std::string first_skip_reason;
};

enum class TraceFormat : uint8_t { kAzure = 0, kNative = 1 };

// "azure" | "native" (any case). InvalidArgument otherwise.
Status ParseTraceFormat(std::string_view name, TraceFormat* format);
const char* TraceFormatName(TraceFormat format);

struct TraceReadOptions {
  TraceFormat format = TraceFormat::kAzure;
  // false: the first malformed row fails the read with
  //        InvalidArgument("<source>:<line>: <reason>").
  // true:  malformed rows are dropped and counted in Trace::skipped_rows.
  // A bad or missing header always fails (the file is not the format asked for).
  // A row that is not well-formed UTF-8 is malformed ("not UTF-8 text (byte 0xFF at
  // column 14)"); no message quotes bytes that are not text.
  bool skip_malformed = false;
  // Name used in messages; ReadTrace sets it to the path when left empty.
  std::string source_name;
  // Azure only: keep rows with start_unix_ms <= Timestamp < end_unix_ms. Cuts
  // memory when reading a window of the 44 M-row real file.
  int64_t start_unix_ms = std::numeric_limits<int64_t>::min();
  int64_t end_unix_ms = std::numeric_limits<int64_t>::max();
  // Stop after this many accepted rows in file order (0 = no limit); for peeking at
  // big files (the released file is unsorted, so these are not the earliest rows).
  uint64_t max_rows = 0;
  // Largest value size a row may carry (0 = no cap beyond the reader's overflow guard).
  // A row over it is malformed ("<source>:<line>: ... exceeds the size cap"), so an
  // absurd size is reported with its line number instead of being allocated later.
  uint64_t max_bytes = 0;
  // ReadTrace polls this (if set) every 4096 lines and, once it reads true, stops with
  // Shutdown: a long read can be cancelled from another thread.
  const std::atomic<bool>* cancel = nullptr;
};

// Reads a whole trace file. IOError if it cannot be opened; InvalidArgument for
// a malformed header or (skip_malformed == false) a malformed row, naming the line.
Status ReadTrace(const std::string& path, const TraceReadOptions& options, Trace* trace);
// Same, from text in memory (tests, fuzzing).
Status ParseTrace(std::string_view text, const TraceReadOptions& options, Trace* trace);

// Writes `trace` in `format`. For azure, the columns the trace does not carry are
// filled deterministically from the key and `seed` (region, user, app, invocation
// id, content type); each write mints a new ETag for its blob, as the service does.
// With shuffle_azure the rows are written in a seeded random order, like the
// released file (readers sort them back).
Status FormatTrace(const Trace& trace, TraceFormat format, uint64_t seed, bool shuffle_azure,
                   std::string* out);
Status WriteTrace(const std::string& path, const Trace& trace, TraceFormat format,
                  uint64_t seed = 0, bool shuffle_azure = false);

struct TraceSummary {
  uint64_t rows = 0, reads = 0, writes = 0, skipped_rows = 0;
  uint64_t distinct_keys = 0;
  uint64_t bytes_p50 = 0, bytes_p99 = 0, bytes_max = 0;  // per access (nearest rank)
  double bytes_mean = 0;
  double duration_s = 0;       // last - first offset
  double accesses_per_s = 0;   // rows / duration (0 if duration is 0)
};
TraceSummary SummarizeTrace(const Trace& trace);

// ---- Synthetic traces ----------------------------------------------------------

// Azure-Functions-like blob accesses. Defaults follow the published statistics of
// the 2020 dataset (docs/workloads-trace.md): Poisson arrivals at 36.6 accesses/s,
// per-blob sizes drawn from the published blob-size percentiles (log-interpolated),
// and heavy blob reuse (rich-get-richer: half of the accesses touch a new blob).
struct AzureSynthOptions {
  uint64_t rows = 10000;
  uint64_t seed = 1;
  double accesses_per_s = 36.6;  // dataset average, 44.3 M rows over 14 days
  // Probability that an access touches a blob not seen before; otherwise an earlier
  // access is picked uniformly and its blob reused (popular blobs get more popular).
  double new_blob_fraction = 0.5;
  // Fraction of accesses that are writes (not published; 0.2 matches the thesis's
  // 80/20 phase windows). A blob's first access is a write with this probability too.
  double write_fraction = 0.2;
  // Timestamp of offset 0: 2020-12-06 00:00 UTC, the day the thesis used.
  int64_t start_unix_ms = 1607212800000;
  // Clip sampled blob sizes to this maximum (the real max is 1.9 GB; replaying a
  // 1.9 GB blob is rarely wanted). 0 = no clip.
  uint64_t max_blob_bytes = 64ull << 20;
  // Polled every 4096 rows (if set): once it reads true synthesis stops with Shutdown.
  const std::atomic<bool>* cancel = nullptr;
};
Status SynthesizeAzure(const AzureSynthOptions& options, Trace* trace);

// Wukong-like tall-skinny SVD jobs (no public trace exists; the shape follows the
// Wukong SVD example: B parallel tasks). One job: B writes of row blocks; B
// QR tasks each read a block and write Q_i and R_i; one reduction reading all R_i
// and writing the stacked R and its factorisation; B tasks reading Q_i and the
// factor and writing the final Q_i block; one write of the singular values. Every
// key is written once and read 1-2 times; keys are never reused across jobs. Jobs
// follow each other until `rows` records exist (the last job is cut).
struct SvdSynthOptions {
  uint64_t rows = 10000;
  uint64_t seed = 1;
  int tasks = 20;                              // B: parallel tasks (Wukong example: 20)
  uint64_t block_bytes = 80'000'000;           // row blocks and Q blocks (~80 MB)
  uint64_t r_bytes = 8'000'000;                // each R_i (~8 MB)
  uint64_t stacked_r_bytes = 160'000'000;      // stacked R (160 MB)
  uint64_t factor_bytes = 168'000'000;         // its factorisation (168 MB)
  uint64_t singular_values_bytes = 8'000;      // singular values (8 KB)
  // Mean compute time of one task between its read and its write, ms (exponential);
  // stages are separated by the slowest task, as in a task graph.
  double task_ms = 50;
  double gap_between_jobs_ms = 200;
  // Polled once per job (if set): once it reads true synthesis stops with Shutdown.
  const std::atomic<bool>* cancel = nullptr;
};
Status SynthesizeSvd(const SvdSynthOptions& options, Trace* trace);

// ---- Filters and transforms ---------------------------------------------------

struct TraceFilter {
  // Keep records with start_s <= offset < end_s (offsets in seconds, as in the trace).
  double start_s = 0;
  double end_s = std::numeric_limits<double>::infinity();
  // Keep records with min_bytes <= bytes <= max_bytes.
  uint64_t min_bytes = 0;
  uint64_t max_bytes = std::numeric_limits<uint64_t>::max();
  // Then keep only the first max_records records (0 = all).
  uint64_t max_records = 0;
  // Re-base the kept records so that the first is at offset 0.
  bool rebase = true;
};
// InvalidArgument for an empty window or size range. `out` may alias `in`.
Status FilterTrace(const Trace& in, const TraceFilter& filter, Trace* out);

struct TraceTransform {
  // >= 0: every record gets exactly this many bytes. -1 keeps sizes.
  int64_t fixed_bytes = -1;
  // In [0, 1]: reassign operations so that round(n * write_ratio) records are
  // writes, chosen by a seeded shuffle (exact ratio, not a coin per record). -1 keeps ops.
  double write_ratio = -1;
  // > 0: map keys onto at most this many distinct keys (by a stable hash). Bounds
  // the memory a replay needs (e.g. 3847 batch records of 800 KB).
  uint64_t key_space = 0;
  // Prefix prepended to every key (lets two replays share a store without clashing).
  std::string key_prefix;
  uint64_t seed = 0;
};
// InvalidArgument for a ratio outside [0, 1] or fixed_bytes < -1. `out` may alias `in`.
Status TransformTrace(const Trace& in, const TraceTransform& transform, Trace* out);

}  // namespace nvmw

#endif  // NVMW_TRACE_H_
