// Synthetic traces: Azure-Functions-like blob accesses (interactive side) and
// Wukong-SVD-like task-graph I/O (batch side). Which published statistic each
// default follows is listed in docs/workloads-trace.md.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nvmw/trace.h"
#include "util/rng.h"
#include "workload/trace_util.h"

namespace nvmw {

using trace_internal::Base36;
using trace_internal::StableHash;

namespace {

// Published blob-size percentiles of the 2020 dataset (per distinct blob version):
// {quantile, bytes}. Between points sizes are interpolated linearly in log(1 + bytes).
constexpr double kAzureSizeQuantiles[][2] = {
    {0.00, 0},         {0.01, 8},          {0.05, 8},       {0.10, 46},
    {0.20, 482},       {0.25, 542},        {0.50, 5302},    {0.75, 9240},
    {0.80, 12367},     {0.90, 26764},      {0.95, 110611},  {0.99, 1589532},
    {1.00, 1910124864}};

uint64_t SampleAzureBlobBytes(Rng* rng) {
  double u = rng->NextDouble();
  constexpr size_t n = sizeof(kAzureSizeQuantiles) / sizeof(kAzureSizeQuantiles[0]);
  for (size_t i = 1; i < n; ++i) {
    double q0 = kAzureSizeQuantiles[i - 1][0], q1 = kAzureSizeQuantiles[i][0];
    if (u < q1 || i == n - 1) {
      double f = (u - q0) / (q1 - q0);
      double l0 = std::log1p(kAzureSizeQuantiles[i - 1][1]);
      double l1 = std::log1p(kAzureSizeQuantiles[i][1]);
      return static_cast<uint64_t>(std::llround(std::expm1(l0 + f * (l1 - l0))));
    }
  }
  return 0;
}

}  // namespace

Status SynthesizeAzure(const AzureSynthOptions& o, Trace* trace) {
  if (o.rows == 0) return Status::InvalidArgument("azure synth: rows must be > 0");
  if (!(o.accesses_per_s > 0)) return Status::InvalidArgument("azure synth: accesses_per_s must be > 0");
  if (!(o.new_blob_fraction > 0 && o.new_blob_fraction <= 1)) {
    return Status::InvalidArgument("azure synth: new_blob_fraction must be in (0, 1]");
  }
  if (!(o.write_fraction >= 0 && o.write_fraction <= 1)) {
    return Status::InvalidArgument("azure synth: write_fraction must be in [0, 1]");
  }
  // One mean gap per row after the first (the exponential gaps' sum strays from it by
  // far less than the int64 microseconds' margin above kMaxScheduleS).
  if (!(static_cast<double>(o.rows - 1) / o.accesses_per_s <= kMaxScheduleS)) {
    return Status::InvalidArgument("azure synth: " + std::to_string(o.rows) + " rows at " +
                                   std::to_string(o.accesses_per_s) +
                                   " accesses/s would span more than 1e9 s: too long to schedule");
  }
  Rng rng(o.seed);
  struct Blob {
    std::string name;
    uint64_t bytes;
  };
  std::vector<Blob> blobs;
  std::vector<uint32_t> access_blob;  // blob of every access so far (reuse picks from it)
  access_blob.reserve(o.rows);
  trace->records.clear();
  trace->records.reserve(o.rows);
  trace->origin_unix_ms = o.start_unix_ms;
  trace->skipped_rows = 0;
  trace->first_skip_reason.clear();
  double t_us = 0;
  const double mean_gap_us = 1e6 / o.accesses_per_s;
  for (uint64_t i = 0; i < o.rows; ++i) {
    if ((i & 4095) == 0 && o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed)) {
      trace->records.clear();
      return Status::Shutdown("azure synth: stopped at row " + std::to_string(i));
    }
    uint32_t b;
    if (blobs.empty() || rng.NextDouble() < o.new_blob_fraction) {
      b = static_cast<uint32_t>(blobs.size());
      uint64_t bytes = SampleAzureBlobBytes(&rng);
      if (o.max_blob_bytes != 0) bytes = std::min(bytes, o.max_blob_bytes);
      blobs.push_back({Base36(StableHash(std::to_string(b), o.seed), 16), bytes});
    } else {
      b = access_blob[rng.Below(access_blob.size())];
    }
    access_blob.push_back(b);
    TraceRecord r;
    // Rounded to ms like the real Timestamp column, so writing the trace as azure
    // and reading it back gives the same offsets.
    r.time_us = static_cast<int64_t>(t_us / 1000.0) * 1000;
    r.op = rng.NextDouble() < o.write_fraction ? TraceOp::kWrite : TraceOp::kRead;
    r.key = blobs[b].name;
    r.bytes = blobs[b].bytes;
    trace->records.push_back(std::move(r));
    t_us += rng.Exponential(mean_gap_us);
  }
  return Status::OK();
}

Status SynthesizeSvd(const SvdSynthOptions& o, Trace* trace) {
  if (o.rows == 0) return Status::InvalidArgument("svd synth: rows must be > 0");
  if (o.tasks < 1 || o.tasks > 100000) return Status::InvalidArgument("svd synth: tasks must be in [1, 100000]");
  if (!(o.task_ms >= 0) || !(o.gap_between_jobs_ms >= 0)) {
    return Status::InvalidArgument("svd synth: task_ms and gap_between_jobs_ms must be >= 0");
  }
  // At most one task time and one gap between jobs per record: a bound, not the span.
  if (!(static_cast<double>(o.rows) * (o.task_ms + o.gap_between_jobs_ms) / 1e3 <= kMaxScheduleS)) {
    return Status::InvalidArgument("svd synth: " + std::to_string(o.rows) +
                                   " rows of up to task_ms + gap_between_jobs_ms each would span "
                                   "more than 1e9 s: too long to schedule");
  }
  Rng rng(o.seed);
  trace->records.clear();
  trace->records.reserve(o.rows);
  trace->origin_unix_ms = 0;
  trace->skipped_rows = 0;
  trace->first_skip_reason.clear();
  const int b = o.tasks;
  const std::string run = Base36(StableHash("svd", o.seed), 6);  // keys unique per seed
  double job_start_ms = 0;
  auto emit = [&](double at_ms, TraceOp op, const std::string& key, uint64_t bytes) {
    if (trace->records.size() >= o.rows) return;
    TraceRecord r;
    r.time_us = std::llround(at_ms * 1000.0);
    r.op = op;
    r.key = key;
    r.bytes = bytes;
    trace->records.push_back(std::move(r));
  };
  // Small start-up jitter so the parallel tasks of one stage do not fire at the same µs.
  auto jitter = [&] { return rng.NextDouble() * std::max(1.0, o.task_ms / 10); };
  for (uint64_t job = 0; trace->records.size() < o.rows; ++job) {
    if (o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed)) {
      trace->records.clear();
      return Status::Shutdown("svd synth: stopped at job " + std::to_string(job));
    }
    std::string p = "svd-" + run + "-" + std::to_string(job) + "-";
    double t = job_start_ms;
    // Stage 0: the input row blocks are written in parallel.
    double end = t;
    for (int i = 0; i < b; ++i) {
      double at = t + jitter();
      emit(at, TraceOp::kWrite, p + "A" + std::to_string(i), o.block_bytes);
      end = std::max(end, at);
    }
    // Stage 1: QR of each block: read A_i, compute, write Q_i and R_i.
    t = end;
    for (int i = 0; i < b; ++i) {
      double at = t + jitter();
      emit(at, TraceOp::kRead, p + "A" + std::to_string(i), o.block_bytes);
      at += rng.Exponential(o.task_ms);
      emit(at, TraceOp::kWrite, p + "Q" + std::to_string(i), o.block_bytes);
      emit(at, TraceOp::kWrite, p + "R" + std::to_string(i), o.r_bytes);
      end = std::max(end, at);
    }
    // Stage 2: one reduction reads every R_i, writes the stacked R, factorises it.
    t = end;
    for (int i = 0; i < b; ++i) emit(t + jitter(), TraceOp::kRead, p + "R" + std::to_string(i), o.r_bytes);
    t += rng.Exponential(o.task_ms) + o.task_ms;
    emit(t, TraceOp::kWrite, p + "Rstack", o.stacked_r_bytes);
    emit(t + jitter(), TraceOp::kRead, p + "Rstack", o.stacked_r_bytes);
    t += rng.Exponential(o.task_ms) + o.task_ms;
    emit(t, TraceOp::kWrite, p + "Rfactor", o.factor_bytes);
    // Stage 3: fan-out: each task reads Q_i and the factor, writes its final block.
    end = t;
    for (int i = 0; i < b; ++i) {
      double at = t + jitter();
      emit(at, TraceOp::kRead, p + "Q" + std::to_string(i), o.block_bytes);
      emit(at, TraceOp::kRead, p + "Rfactor", o.factor_bytes);
      at += rng.Exponential(o.task_ms);
      emit(at, TraceOp::kWrite, p + "U" + std::to_string(i), o.block_bytes);
      end = std::max(end, at);
    }
    // Stage 4: the singular values.
    emit(end + jitter(), TraceOp::kWrite, p + "S", o.singular_values_bytes);
    job_start_ms = end + o.gap_between_jobs_ms;
  }
  // Jitter can put a later-emitted record before an earlier one within a stage.
  std::stable_sort(trace->records.begin(), trace->records.end(),
                   [](const TraceRecord& a, const TraceRecord& c) { return a.time_us < c.time_us; });
  return Status::OK();
}

}  // namespace nvmw
