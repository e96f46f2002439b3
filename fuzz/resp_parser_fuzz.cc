// libFuzzer target for the Redis-protocol request parser (src/server/resp.h): arbitrary
// bytes, fed whole and again in pieces whose sizes the first byte picks (and, for odd
// patterns, partly written straight into BulkSink()), must give the same commands and
// the same error either way; every command respects the caps; a
// command re-encoded as multibulk parses back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// src/ is not on the fuzz targets' include path; the parser itself comes from nvmw_core.
#include "../src/server/resp.h"

namespace {

using nvmw::resp::Parser;
using nvmw::resp::ParserLimits;

struct Outcome {
  std::vector<std::vector<std::string>> commands;
  std::string error;
};

ParserLimits Limits() {
  ParserLimits l;
  l.max_bulk_bytes = 4096;
  l.max_args = 64;
  l.max_inline_bytes = 1024;
  return l;
}

// Parses `data` in pieces of 1 + (pattern + k) % step bytes (one piece when step == 0).
Outcome Run(const uint8_t* data, size_t size, unsigned step, unsigned pattern) {
  Parser p(Limits());
  Outcome out;
  size_t pos = 0;
  for (unsigned k = 0; pos < size; ++k) {
    const size_t piece = step == 0 ? size - pos : std::min<size_t>(size - pos, 1 + (pattern + k) % step);
    const char* chunk = reinterpret_cast<const char*>(data + pos);
    size_t off = 0;
    // Odd patterns write what fits straight into the argument, as the server's reads do.
    size_t room = 0;
    if ((pattern & 1) != 0) {
      if (char* sink = p.BulkSink(1, &room)) {
        if (room == 0) std::abort();
        const size_t n = std::min(room, piece);
        std::memcpy(sink, chunk, n);
        p.BulkFilled(n);
        off = n;
      }
    }
    for (;;) {
      size_t used = 0;
      const Parser::Result r = p.Parse(chunk + off, piece - off, &used);
      if (used > piece - off) std::abort();
      off += used;
      if (r == Parser::Result::kError) {
        out.error = p.error();
        if (out.error.rfind("Protocol error: ", 0) != 0) std::abort();
        // An error is final.
        size_t again = 0;
        if (p.Parse("PING\r\n", 6, &again) != Parser::Result::kError || again != 0) std::abort();
        return out;
      }
      if (r == Parser::Result::kNeedMore) {
        if (off != piece) std::abort();  // need-more consumes everything
        break;
      }
      const auto& args = p.args();
      if (args.empty() || args.size() > Limits().max_args) std::abort();
      for (const auto& a : args) {
        if (a.size() > Limits().max_bulk_bytes) std::abort();
      }
      out.commands.push_back(args);
    }
    pos += piece;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned step = data[0] & 15;
  const unsigned pattern = data[0] >> 4;
  const Outcome whole = Run(data + 1, size - 1, 0, 0);
  const Outcome pieces = Run(data + 1, size - 1, step, pattern);
  if (whole.commands != pieces.commands || whole.error != pieces.error) std::abort();
  for (const auto& cmd : whole.commands) {
    std::string enc;
    nvmw::resp::AppendArrayHeader(&enc, cmd.size());
    for (const auto& a : cmd) nvmw::resp::AppendBulk(&enc, a);
    const Outcome back = Run(reinterpret_cast<const uint8_t*>(enc.data()), enc.size(), 0, 0);
    if (!back.error.empty() || back.commands.size() != 1 || back.commands[0] != cmd) std::abort();
  }
  return 0;
}
