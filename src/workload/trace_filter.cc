// Trace filters (time window, size range, record cap) and transforms (fixed
// size, exact read/write ratio, bounded key space, key prefix).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "nvmw/trace.h"
#include "util/rng.h"
#include "workload/trace_util.h"

namespace nvmw {

Status FilterTrace(const Trace& in, const TraceFilter& f, Trace* out) {
  if (!(f.start_s < f.end_s) || std::isnan(f.start_s)) {
    return Status::InvalidArgument("trace filter: empty time window [" + std::to_string(f.start_s) +
                                   ", " + std::to_string(f.end_s) + ")");
  }
  if (f.min_bytes > f.max_bytes) {
    return Status::InvalidArgument("trace filter: min_bytes " + std::to_string(f.min_bytes) +
                                   " > max_bytes " + std::to_string(f.max_bytes));
  }
  std::vector<TraceRecord> kept;
  for (const TraceRecord& r : in.records) {
    double t = static_cast<double>(r.time_us) / 1e6;
    if (t < f.start_s || t >= f.end_s) continue;
    if (r.bytes < f.min_bytes || r.bytes > f.max_bytes) continue;
    kept.push_back(r);
    if (f.max_records != 0 && kept.size() >= f.max_records) break;
  }
  int64_t shift = 0;
  if (f.rebase && !kept.empty()) {
    shift = kept.front().time_us;
    for (TraceRecord& r : kept) r.time_us -= shift;
  }
  out->origin_unix_ms = in.origin_unix_ms + shift / 1000;
  out->skipped_rows = in.skipped_rows;
  out->first_skip_reason = in.first_skip_reason;
  out->records = std::move(kept);
  return Status::OK();
}

Status TransformTrace(const Trace& in, const TraceTransform& t, Trace* out) {
  if (t.fixed_bytes < -1) return Status::InvalidArgument("trace transform: fixed_bytes must be >= 0 (or -1 to keep sizes)");
  bool set_ratio = t.write_ratio != -1;
  if (set_ratio && !(t.write_ratio >= 0 && t.write_ratio <= 1)) {
    return Status::InvalidArgument("trace transform: write_ratio must be in [0, 1] (or -1 to keep ops)");
  }
  if (&in != out) *out = in;
  std::vector<TraceRecord>& recs = out->records;
  if (t.fixed_bytes >= 0) {
    for (TraceRecord& r : recs) r.bytes = static_cast<uint64_t>(t.fixed_bytes);
  }
  if (set_ratio && !recs.empty()) {
    // Exact count, spread by a seeded shuffle, so a 3847-record phase really is 50/50.
    size_t writes = static_cast<size_t>(std::llround(t.write_ratio * static_cast<double>(recs.size())));
    std::vector<size_t> order(recs.size());
    std::iota(order.begin(), order.end(), 0);
    Rng rng(t.seed ^ 0x5EEDu);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
    for (size_t i = 0; i < order.size(); ++i) {
      recs[order[i]].op = i < writes ? TraceOp::kWrite : TraceOp::kRead;
    }
  }
  if (t.key_space > 0) {
    for (TraceRecord& r : recs) {
      r.key = "k" + std::to_string(trace_internal::StableHash(r.key, t.seed) % t.key_space);
    }
  }
  if (!t.key_prefix.empty()) {
    for (TraceRecord& r : recs) r.key.insert(0, t.key_prefix);
  }
  return Status::OK();
}

}  // namespace nvmw
