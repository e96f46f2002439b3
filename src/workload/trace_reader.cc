// Trace readers and writers: the Azure Functions Blob 2020 CSV (exact released
// schema) and nvmw's native CSV; plus the trace summary used by `nvmw trace stats`.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "nvmw/trace.h"
#include "../util/input_file.h"
#include "../util/rng.h"  // relative paths: also found when fuzz/ compiles this file
#include "trace_util.h"

namespace nvmw {

using trace_internal::EqualsIgnoreCase;
using trace_internal::Trim;

namespace {

constexpr std::string_view kAzureHeader =
    "Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,"
    "BlobType,AnonBlobETag,BlobBytes,Read,Write";
constexpr int kAzureColumns = 11;
constexpr std::string_view kNativeHeader = "time_ms,op,key,bytes";

// Largest size or offset we accept; keeps arithmetic on them overflow-free.
constexpr double kMaxBytes = 9.0e15;
constexpr double kMaxTimeMs = 9.0e12;  // ~285 years of offsets, in ms

// Splits on ',' into at most max_fields + 1 pieces (the extra one flags "too many").
int SplitFields(std::string_view line, std::string_view* fields, int max_fields) {
  int n = 0;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (n == max_fields) return n + 1;  // more fields than allowed
    if (comma == std::string_view::npos) {
      fields[n++] = line.substr(start);
      return n;
    }
    fields[n++] = line.substr(start, comma - start);
    start = comma + 1;
  }
}

bool ParseInt64(std::string_view s, int64_t* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool ParseUint64(std::string_view s, uint64_t* out) {
  s = Trim(s);
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A finite, non-negative decimal such as "30.0" or "1e3".
bool ParseNonNegativeDouble(std::string_view s, double limit, double* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  return std::isfinite(*out) && *out >= 0 && *out <= limit;
}

bool ParseBool(std::string_view s, bool* out) {
  s = Trim(s);
  if (EqualsIgnoreCase(s, "true")) {
    *out = true;
    return true;
  }
  if (EqualsIgnoreCase(s, "false")) {
    *out = false;
    return true;
  }
  return false;
}

// Offset of the first byte of `text` that does not belong to well-formed UTF-8
// (overlong forms, surrogates and code points above U+10FFFF included), or npos.
size_t FirstInvalidUtf8(std::string_view text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return i;
    if (i + len > n || b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Compares a header line with the expected one, ignoring case and spaces around names.
bool HeaderMatches(std::string_view line, std::string_view expected) {
  std::string_view got[16], want[16];
  int n_got = SplitFields(line, got, 15), n_want = SplitFields(expected, want, 15);
  if (n_got != n_want) return false;
  for (int i = 0; i < n_got; ++i) {
    if (!EqualsIgnoreCase(Trim(got[i]), want[i])) return false;
  }
  return true;
}

struct Timed {
  int64_t time;  // Azure: unix ms; native: us
  TraceRecord record;
};

class Parser {
 public:
  Parser(const TraceReadOptions& options)
      : options_(options),
        name_(options.source_name.empty() ? "trace" : options.source_name) {}

  // Feeds one physical line (without '\n'). Returns a non-OK status to abort.
  Status Line(std::string_view line) {
    ++line_no_;
    if (line_no_ == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // BOM
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (done_) return Status::OK();
    std::string_view trimmed = Trim(line);
    bool native = options_.format == TraceFormat::kNative;
    if (trimmed.empty() || (native && trimmed[0] == '#')) return Status::OK();
    if (!header_seen_) {
      header_seen_ = true;
      std::string_view expected = native ? kNativeHeader : kAzureHeader;
      if (!HeaderMatches(trimmed, expected)) {
        return Error("expected the " + std::string(TraceFormatName(options_.format)) +
                     " header '" + std::string(expected) + "'");
      }
      return Status::OK();
    }
    std::string reason;
    bool ok;
    if (const size_t bad = FirstInvalidUtf8(line); bad != std::string_view::npos) {
      // Checked first, so that no message below quotes bytes that are not text.
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(line[bad]));
      reason = "not UTF-8 text (byte " + std::string(hex) + " at column " + std::to_string(bad + 1) + ")";
      ok = false;
    } else {
      ok = native ? NativeRow(line, &reason) : AzureRow(line, &reason);
    }
    if (!ok) {
      if (!options_.skip_malformed) return Error(reason);
      if (skipped_ == 0) first_skip_reason_ = Where() + reason;
      ++skipped_;
    }
    return Status::OK();
  }

  Status Finish(Trace* trace) {
    if (!header_seen_) {
      return Status::InvalidArgument(name_ + ": empty file, expected the " +
                                     std::string(TraceFormatName(options_.format)) + " header");
    }
    std::stable_sort(rows_.begin(), rows_.end(),
                     [](const Timed& a, const Timed& b) { return a.time < b.time; });
    trace->records.clear();
    trace->records.reserve(rows_.size());
    trace->origin_unix_ms = 0;
    if (options_.format == TraceFormat::kAzure && !rows_.empty()) {
      const int64_t origin = rows_.front().time;
      // Offsets are kept in us: refuse a span whose us do not fit in 64 bits (about
      // 292,000 years; only a corrupt timestamp gets there) instead of overflowing.
      const int64_t last = rows_.back().time;
      int64_t span_ms = 0, span_us = 0;
      if (__builtin_sub_overflow(last, origin, &span_ms) ||
          __builtin_mul_overflow(span_ms, int64_t{1000}, &span_us)) {
        rows_.clear();
        return Status::InvalidArgument(name_ + ": timestamps from " + std::to_string(origin) + " to " +
                                       std::to_string(last) +
                                       " ms are too far apart for a trace (a corrupt Timestamp column?)");
      }
      trace->origin_unix_ms = origin;
      for (Timed& r : rows_) {
        r.record.time_us = (r.time - origin) * 1000;
        trace->records.push_back(std::move(r.record));
      }
    } else {
      for (Timed& r : rows_) trace->records.push_back(std::move(r.record));
    }
    rows_.clear();
    trace->skipped_rows = skipped_;
    trace->first_skip_reason = first_skip_reason_;
    return Status::OK();
  }

 private:
  std::string Where() const { return name_ + ":" + std::to_string(line_no_) + ": "; }
  Status Error(const std::string& reason) const { return Status::InvalidArgument(Where() + reason); }

  void Accept(int64_t time, TraceRecord record) {
    rows_.push_back(Timed{time, std::move(record)});
    if (options_.max_rows != 0 && rows_.size() >= options_.max_rows) done_ = true;
  }

  bool AzureRow(std::string_view line, std::string* reason) {
    std::string_view f[kAzureColumns + 1];
    int n = SplitFields(line, f, kAzureColumns);
    if (n != kAzureColumns) {
      *reason = n > kAzureColumns ? "more than 11 columns"
                                  : "expected 11 columns, got " + std::to_string(n);
      return false;
    }
    int64_t ts;
    if (!ParseInt64(f[0], &ts) || ts < 0) {
      *reason = "Timestamp '" + std::string(f[0]) + "' is not a non-negative integer (ms)";
      return false;
    }
    std::string_view key = Trim(f[5]);
    if (key.empty()) {
      *reason = "empty AnonBlobName";
      return false;
    }
    double bytes = 0;
    if (!Trim(f[8]).empty() && !ParseNonNegativeDouble(f[8], kMaxBytes, &bytes)) {
      *reason = "BlobBytes '" + std::string(f[8]) + "' is not a non-negative number";
      return false;
    }
    if (options_.max_bytes != 0 && bytes > static_cast<double>(options_.max_bytes)) {
      *reason = "BlobBytes " + std::string(Trim(f[8])) + " exceeds the size cap " +
                std::to_string(options_.max_bytes);
      return false;
    }
    bool read, write;
    if (!ParseBool(f[9], &read) || !ParseBool(f[10], &write)) {
      *reason = "Read/Write must be True or False, got '" + std::string(f[9]) + "', '" +
                std::string(f[10]) + "'";
      return false;
    }
    if (read == write) {
      *reason = "exactly one of Read and Write must be True";
      return false;
    }
    if (ts < options_.start_unix_ms || ts >= options_.end_unix_ms) return true;  // filtered, not malformed
    TraceRecord r;
    r.op = write ? TraceOp::kWrite : TraceOp::kRead;
    r.key.assign(key);
    r.bytes = static_cast<uint64_t>(std::llround(bytes));
    Accept(ts, std::move(r));
    return true;
  }

  bool NativeRow(std::string_view line, std::string* reason) {
    std::string_view f[5];
    int n = SplitFields(line, f, 4);
    if (n != 4) {
      *reason = n > 4 ? "more than 4 columns (keys cannot contain ',')"
                      : "expected 4 columns time_ms,op,key,bytes, got " + std::to_string(n);
      return false;
    }
    double ms;
    if (!ParseNonNegativeDouble(f[0], kMaxTimeMs, &ms)) {
      *reason = "time_ms '" + std::string(f[0]) + "' is not a non-negative number";
      return false;
    }
    std::string_view op = Trim(f[1]);
    TraceRecord r;
    if (EqualsIgnoreCase(op, "read") || EqualsIgnoreCase(op, "r") || EqualsIgnoreCase(op, "get")) {
      r.op = TraceOp::kRead;
    } else if (EqualsIgnoreCase(op, "write") || EqualsIgnoreCase(op, "w") ||
               EqualsIgnoreCase(op, "put")) {
      r.op = TraceOp::kWrite;
    } else {
      *reason = "op '" + std::string(op) + "' is not read or write";
      return false;
    }
    std::string_view key = Trim(f[2]);
    if (key.empty()) {
      *reason = "empty key";
      return false;
    }
    uint64_t bytes;
    if (!ParseUint64(f[3], &bytes) || bytes > static_cast<uint64_t>(kMaxBytes)) {
      *reason = "bytes '" + std::string(f[3]) + "' is not a non-negative integer";
      return false;
    }
    if (options_.max_bytes != 0 && bytes > options_.max_bytes) {
      *reason = "bytes " + std::to_string(bytes) + " exceeds the size cap " + std::to_string(options_.max_bytes);
      return false;
    }
    r.key.assign(key);
    r.bytes = bytes;
    r.time_us = std::llround(ms * 1000.0);
    Accept(r.time_us, std::move(r));
    return true;
  }

  const TraceReadOptions& options_;
  std::string name_;
  uint64_t line_no_ = 0;
  bool header_seen_ = false;
  bool done_ = false;
  uint64_t skipped_ = 0;
  std::string first_skip_reason_;
  std::vector<Timed> rows_;
};

}  // namespace

Status ParseTraceFormat(std::string_view name, TraceFormat* format) {
  if (EqualsIgnoreCase(Trim(name), "azure")) {
    *format = TraceFormat::kAzure;
  } else if (EqualsIgnoreCase(Trim(name), "native")) {
    *format = TraceFormat::kNative;
  } else {
    return Status::InvalidArgument("unknown trace format '" + std::string(name) +
                                   "' (expected azure or native)");
  }
  return Status::OK();
}

const char* TraceFormatName(TraceFormat format) {
  return format == TraceFormat::kAzure ? "azure" : "native";
}

Status ParseTrace(std::string_view text, const TraceReadOptions& options, Trace* trace) {
  Parser parser(options);
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string_view::npos ? text.size() : nl;
    Status s = parser.Line(text.substr(start, end - start));
    if (!s.ok()) return s;
    start = end + 1;
  }
  return parser.Finish(trace);
}

Status ReadTrace(const std::string& path, const TraceReadOptions& options, Trace* trace) {
  std::FILE* file = nullptr;
  if (int err = OpenInputFile(path, &file); err != 0) {
    return Status::IOError(path + ": cannot open: " + std::strerror(err));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(file, &std::fclose);
  TraceReadOptions opts = options;
  if (opts.source_name.empty()) opts.source_name = path;
  Parser parser(opts);
  char* buf = nullptr;
  size_t cap = 0;
  std::unique_ptr<char*, void (*)(char**)> free_buf(&buf, [](char** b) { std::free(*b); });
  uint64_t lines = 0;
  ssize_t n;
  while ((n = ::getline(&buf, &cap, in.get())) >= 0) {
    if ((++lines & 4095) == 0 && opts.cancel != nullptr && opts.cancel->load(std::memory_order_relaxed)) {
      return Status::Shutdown(path + ": read stopped at line " + std::to_string(lines));
    }
    std::string_view line(buf, static_cast<size_t>(n));
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    Status s = parser.Line(line);
    if (!s.ok()) return s;
  }
  if (std::ferror(in.get())) return Status::IOError(path + ": read error");
  return parser.Finish(trace);
}

Status FormatTrace(const Trace& trace, TraceFormat format, uint64_t seed, bool shuffle_azure,
                   std::string* out) {
  using trace_internal::Base36;
  using trace_internal::StableHash;
  out->clear();
  for (size_t i = 0; i < trace.records.size(); ++i) {
    const std::string& key = trace.records[i].key;
    if (key.empty() || key.find_first_of(",\n\r") != std::string::npos) {
      return Status::InvalidArgument("record " + std::to_string(i) + ": key '" + key +
                                     "' is empty or holds ',' or a newline; not writable as CSV");
    }
  }
  char buf[96];
  if (format == TraceFormat::kNative) {
    out->append(kNativeHeader).append("\n");
    for (const TraceRecord& r : trace.records) {
      std::snprintf(buf, sizeof(buf), "%lld.%03lld,%s,", static_cast<long long>(r.time_us / 1000),
                    static_cast<long long>(r.time_us % 1000), r.op == TraceOp::kRead ? "read" : "write");
      out->append(buf).append(r.key);
      std::snprintf(buf, sizeof(buf), ",%llu\n", static_cast<unsigned long long>(r.bytes));
      out->append(buf);
    }
    return Status::OK();
  }
  // Azure: the columns a Trace does not carry are derived from the key, so one
  // blob always has the same region/app/user/content type; a write mints a new ETag.
  static constexpr const char* kTypes[] = {
      "BlockBlob/application/octet-stream", "BlockBlob/", "BlockBlob/text/plain; charset=utf-8",
      "BlockBlob/application/json", "BlockBlob/image/png"};
  std::unordered_map<std::string_view, uint64_t> version;
  std::vector<std::string> rows;
  rows.reserve(trace.records.size());
  Rng rng(seed ^ 0xA2u);
  for (const TraceRecord& r : trace.records) {
    uint64_t kh = StableHash(r.key, seed);
    uint64_t app = kh % 997;  // blobs group into apps
    uint64_t& v = version[r.key];
    if (r.op == TraceOp::kWrite) ++v;
    std::string row;
    row.reserve(128);
    row += std::to_string(trace.origin_unix_ms + r.time_us / 1000);
    row += ',' + Base36(StableHash("region", app % 7), 3);
    row += ',' + std::to_string(StableHash("user", app) % 2000000000);
    row += ',' + Base36(StableHash("app", app), 8);
    row += ',' + std::to_string(rng.Next() % 2000000000);
    row += ',' + r.key;
    row += ',';
    row += kTypes[(kh >> 20) % 5];
    row += ',' + Base36(StableHash(r.key, v * 1315423911u + seed), 10);
    std::snprintf(buf, sizeof(buf), ",%llu.0,%s", static_cast<unsigned long long>(r.bytes),
                  r.op == TraceOp::kRead ? "True,False" : "False,True");
    row += buf;
    rows.push_back(std::move(row));
  }
  if (shuffle_azure) {
    for (size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.Below(i)]);
  }
  out->append(kAzureHeader).append("\n");
  for (const std::string& row : rows) out->append(row).append("\n");
  return Status::OK();
}

Status WriteTrace(const std::string& path, const Trace& trace, TraceFormat format, uint64_t seed,
                  bool shuffle_azure) {
  std::string text;
  Status s = FormatTrace(trace, format, seed, shuffle_azure, &text);
  if (!s.ok()) return s;
  auto write = [&](const std::string& file) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError(path + ": cannot create: " + std::strerror(errno));
    errno = 0;
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      return Status::IOError(path + ": write failed" +
                             (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
    }
    return Status::OK();
  };
  // What is there and not a regular file (a device such as /dev/stdout, a FIFO, a
  // directory) is written in place or refused: a rename would replace the node itself.
  // A symbolic link to a file is written through (the rename replaced the link).
  std::string target = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return write(path);
    std::unique_ptr<char, void (*)(void*)> real(::realpath(path.c_str(), nullptr), &std::free);
    if (real != nullptr) target = real.get();
  } else if (errno != ENOENT) {
    return Status::IOError(path + ": cannot create: " + std::strerror(errno));
  }
  // Write beside the target and rename, so a failed write never leaves half a trace. The
  // temporary's name is this writer's own: two writers of one path each rename a whole
  // trace (with one name for all, they wrote into one file and renamed a mix of both).
  static std::atomic<uint64_t> writes{0};
  std::string tmp = target + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(writes.fetch_add(1, std::memory_order_relaxed));
  s = write(tmp);
  if (!s.ok()) {
    std::remove(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IOError(path + ": rename failed: " + std::strerror(errno));
  }
  return Status::OK();
}

TraceSummary SummarizeTrace(const Trace& trace) {
  TraceSummary s;
  s.rows = trace.records.size();
  s.skipped_rows = trace.skipped_rows;
  if (s.rows == 0) return s;
  std::vector<uint64_t> sizes;
  sizes.reserve(s.rows);
  std::unordered_map<std::string_view, char> keys;
  double total = 0;
  int64_t first = trace.records.front().time_us, last = first;
  for (const TraceRecord& r : trace.records) {
    (r.op == TraceOp::kRead ? s.reads : s.writes)++;
    sizes.push_back(r.bytes);
    total += static_cast<double>(r.bytes);
    keys.emplace(r.key, 0);
    first = std::min(first, r.time_us);
    last = std::max(last, r.time_us);
  }
  std::sort(sizes.begin(), sizes.end());
  auto rank = [&](double q) {  // nearest rank
    size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(sizes.size())));
    return sizes[std::clamp<size_t>(k, 1, sizes.size()) - 1];
  };
  s.bytes_p50 = rank(0.50);
  s.bytes_p99 = rank(0.99);
  s.bytes_max = sizes.back();
  s.bytes_mean = total / static_cast<double>(s.rows);
  s.distinct_keys = keys.size();
  s.duration_s = static_cast<double>(last - first) / 1e6;
  if (s.duration_s > 0) s.accesses_per_s = static_cast<double>(s.rows) / s.duration_s;
  return s;
}

}  // namespace nvmw
