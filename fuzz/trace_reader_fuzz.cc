// libFuzzer target for the trace readers: arbitrary bytes parsed as an Azure or a
// native trace (first byte picks format and skip mode), then summarised and written
// back; whatever parses must round-trip through the writer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nvmw/trace.h"

// The role libraries are built without coverage instrumentation, so the reader is
// compiled into this target directly (its symbols then win over the library's copy).
#include "../src/workload/trace_reader.cc"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  nvmw::TraceReadOptions options;
  options.format = (data[0] & 1) ? nvmw::TraceFormat::kNative : nvmw::TraceFormat::kAzure;
  options.skip_malformed = (data[0] & 2) != 0;
  options.source_name = "fuzz.csv";
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  nvmw::Trace trace;
  nvmw::Status s = nvmw::ParseTrace(text, options, &trace);
  if (!s.ok()) {
    // Every rejection names the source (and the line, for rows).
    if (s.message().rfind("fuzz.csv", 0) != 0) std::abort();
    return 0;
  }
  nvmw::SummarizeTrace(trace);
  for (size_t i = 1; i < trace.records.size(); ++i) {
    if (trace.records[i - 1].time_us > trace.records[i].time_us) std::abort();  // sorted
  }
  std::string out;
  if (nvmw::FormatTrace(trace, options.format, 0, false, &out).ok()) {
    nvmw::Trace again;
    nvmw::TraceReadOptions strict = options;
    strict.skip_malformed = false;
    if (!nvmw::ParseTrace(out, strict, &again).ok()) std::abort();
    if (again.records.size() != trace.records.size()) std::abort();
  }
  return 0;
}
