// RESP2 request parser and reply encoders (see resp.h).
#include "server/resp.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace nvmw::resp {

namespace {

// A "*<n>" or "$<len>" line is a sign and at most 19 digits; anything longer is wrong.
constexpr size_t kMaxNumberLine = 32;
// Memory taken up front for one argument: the declared length, at most this much (a
// client declaring 512 MB and sending nothing holds no 512 MB; larger arguments grow,
// doubling, as their bytes arrive, and never beyond the declared length).
constexpr uint64_t kMaxReserve = 1 << 20;
constexpr size_t kMaxReserveArgs = 1024;
// Redis's caps for a client that has not authenticated (processMultibulkBuffer).
constexpr int64_t kMaxUnauthenticatedArgs = 10;
constexpr int64_t kMaxUnauthenticatedBulk = 16384;

// Sizes *s to n bytes without zero-filling the bytes past its old size where the library
// allows it (C++23 resize_and_overwrite; CMakeLists.txt compiles this file as C++23 when
// the compiler can): they are overwritten by the argument's bytes before anything reads
// them, and zero-filling an 800 KB value first costs the io thread about as much memory
// traffic as receiving it (29 % of the io thread's samples in bench/results-serve-profile.json).
// The operation returns the n asked for, not the size it is handed: libstdc++ 12 hands it
// the capacity it allocated, which may be larger (a 16-byte key would become 30 bytes).
void SizeUninitialized(std::string* s, size_t n) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  s->resize_and_overwrite(n, [n](char*, size_t) { return n; });
#else
  s->resize(n);
#endif
}

// Parses a decimal integer (optional '-'); false for anything else or overflow.
bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, *out);
  return ec == std::errc() && ptr == last && !(s[0] == '-' && s.size() == 1);
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'; }

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

}  // namespace

Parser::Result Parser::Fail(const char* msg) {
  state_ = State::kError;
  error_ = std::string("Protocol error: ") + msg;
  return Result::kError;
}

bool Parser::ReadLine(const char* data, size_t n, size_t* i, size_t cap) {
  const char* start = data + *i;
  const size_t avail = n - *i;
  const void* nl = std::memchr(start, '\n', avail);
  const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : avail;
  if (line_.size() + take > cap) {
    // Keep cap + 1 bytes: the caller tells an overlong line by its size.
    line_.append(start, cap + 1 - line_.size());
    *i += take;
    return false;
  }
  line_.append(start, take);
  buffered_ += take;
  *i += take;
  if (nl == nullptr) return false;
  *i += 1;  // the '\n'
  return true;
}

void Parser::ClearArgs() {
  if (args_.capacity() > kKeepArgs) {
    std::vector<std::string>().swap(args_);
  } else {
    args_.clear();
  }
}

Parser::Result Parser::Parse(const char* data, size_t n, size_t* consumed) {
  size_t i = 0;
  *consumed = 0;
  if (state_ == State::kError) return Result::kError;
  if (state_ == State::kStart) {
    ClearArgs();
    buffered_ = 0;
  }
  for (;;) {
    switch (state_) {
      case State::kError:
        return Result::kError;

      case State::kStart:
        if (i == n) {
          *consumed = i;
          return Result::kNeedMore;
        }
        ClearArgs();
        line_.clear();
        buffered_ = 0;
        if (data[i] == '*') {
          ++i;
          state_ = State::kArrayLen;
        } else {
          state_ = State::kInline;
        }
        break;

      case State::kArrayLen: {
        if (!ReadLine(data, n, &i, kMaxNumberLine)) {
          if (line_.size() > kMaxNumberLine) return Fail("too big mbulk count string");
          *consumed = i;
          return Result::kNeedMore;
        }
        if (line_.empty() || line_.back() != '\r') return Fail("invalid multibulk length");
        int64_t count = 0;
        if (!ParseInt(std::string_view(line_).substr(0, line_.size() - 1), &count)) {
          return Fail("invalid multibulk length");
        }
        line_.clear();
        if (unauthenticated_ && count > kMaxUnauthenticatedArgs) return Fail("unauthenticated multibulk length");
        if (count <= 0) {  // "*0" and "*-1": no command, as in Redis
          state_ = State::kStart;
          break;
        }
        if (static_cast<uint64_t>(count) > limits_.max_args) {
          error_ = "Protocol error: too many arguments (" + std::to_string(count) +
                   ", the limit is " + std::to_string(limits_.max_args) + ")";
          state_ = State::kError;
          return Result::kError;
        }
        remaining_args_ = count;
        args_.reserve(std::min<size_t>(static_cast<size_t>(count), kMaxReserveArgs));
        state_ = State::kBulkLen;
        break;
      }

      case State::kBulkLen: {
        if (i == n) {
          *consumed = i;
          return Result::kNeedMore;
        }
        if (line_.empty() && data[i] != '$') {
          const char c = data[i];
          error_ = "Protocol error: expected '$', got '";
          if (c >= 0x20 && c < 0x7f) {
            error_ += c;
          } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
            error_ += hex;
          }
          error_ += "'";
          state_ = State::kError;
          return Result::kError;
        }
        if (!ReadLine(data, n, &i, kMaxNumberLine)) {
          if (line_.size() > kMaxNumberLine) return Fail("invalid bulk length");
          *consumed = i;
          return Result::kNeedMore;
        }
        int64_t len = 0;
        if (line_.size() < 3 || line_.back() != '\r' ||
            !ParseInt(std::string_view(line_).substr(1, line_.size() - 2), &len) || len < 0) {
          return Fail("invalid bulk length");
        }
        if (static_cast<uint64_t>(len) > limits_.max_bulk_bytes) {
          error_ = "Protocol error: invalid bulk length (" + std::to_string(len) +
                   " bytes, the limit is " + std::to_string(limits_.max_bulk_bytes) + ")";
          state_ = State::kError;
          return Result::kError;
        }
        if (unauthenticated_ && len > kMaxUnauthenticatedBulk) return Fail("unauthenticated bulk length");
        buffered_ -= std::min(buffered_, line_.size());
        line_.clear();
        args_.emplace_back();
        // The argument's string is sized ahead of the bytes and filled in place, by Parse
        // or by a read straight into BulkSink().
        SizeUninitialized(&args_.back(), static_cast<size_t>(std::min<uint64_t>(len, kMaxReserve)));
        bulk_len_ = static_cast<uint64_t>(len);
        bulk_filled_ = 0;
        bulk_left_ = static_cast<uint64_t>(len);
        state_ = bulk_left_ > 0 ? State::kBulkData : State::kBulkCr;
        break;
      }

      case State::kBulkData: {
        if (i == n) {
          *consumed = i;
          return Result::kNeedMore;
        }
        const size_t take = static_cast<size_t>(std::min<uint64_t>(bulk_left_, n - i));
        GrowBulk(take);
        std::memcpy(args_.back().data() + bulk_filled_, data + i, take);
        i += take;
        BulkFilled(take);
        break;
      }

      case State::kBulkCr:
        if (i == n) {
          *consumed = i;
          return Result::kNeedMore;
        }
        if (data[i] != '\r') return Fail("expected CRLF after a bulk argument");
        ++i;
        state_ = State::kBulkLf;
        break;

      case State::kBulkLf:
        if (i == n) {
          *consumed = i;
          return Result::kNeedMore;
        }
        if (data[i] != '\n') return Fail("expected CRLF after a bulk argument");
        ++i;
        if (--remaining_args_ == 0) {
          state_ = State::kStart;
          *consumed = i;
          return Result::kCommand;
        }
        state_ = State::kBulkLen;
        break;

      case State::kInline: {
        if (!ReadLine(data, n, &i, limits_.max_inline_bytes)) {
          if (line_.size() > limits_.max_inline_bytes) return Fail("too big inline request");
          *consumed = i;
          return Result::kNeedMore;
        }
        std::string_view line(line_);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (!SplitInline(line)) return Fail("unbalanced quotes in request");
        line_.clear();
        state_ = State::kStart;
        if (args_.empty()) break;  // empty line: nothing to run
        if (args_.size() > limits_.max_args) {
          error_ = "Protocol error: too many arguments (" + std::to_string(args_.size()) +
                   ", the limit is " + std::to_string(limits_.max_args) + ")";
          state_ = State::kError;
          return Result::kError;
        }
        *consumed = i;
        return Result::kCommand;
      }
    }
  }
}

void Parser::GrowBulk(size_t want) {
  std::string& arg = args_.back();
  if (bulk_filled_ + want <= arg.size()) return;
  const uint64_t grown = std::max<uint64_t>(bulk_filled_ + want, 2 * static_cast<uint64_t>(arg.size()));
  SizeUninitialized(&arg, static_cast<size_t>(std::min<uint64_t>(grown, bulk_len_)));
}

char* Parser::BulkSink(size_t min_bytes, size_t* room) {
  *room = 0;
  if (state_ != State::kBulkData || bulk_left_ < min_bytes) return nullptr;
  GrowBulk(static_cast<size_t>(std::min<uint64_t>(bulk_left_, kMaxReserve)));
  std::string& arg = args_.back();
  *room = arg.size() - static_cast<size_t>(bulk_filled_);
  return arg.data() + bulk_filled_;
}

void Parser::BulkFilled(size_t n) {
  bulk_filled_ += n;
  bulk_left_ -= n;
  buffered_ += n;
  if (bulk_left_ == 0) state_ = State::kBulkCr;
}

bool Parser::SplitInline(std::string_view line) {
  args_.clear();
  size_t p = 0;
  const size_t end = line.size();
  for (;;) {
    while (p < end && IsSpace(line[p])) ++p;
    if (p >= end) return true;
    bool inq = false, insq = false, done = false;
    std::string current;
    while (!done) {
      if (inq) {
        if (p >= end) return false;
        const char c = line[p];
        if (c == '\\' && p + 3 < end && line[p + 1] == 'x' && IsHex(line[p + 2]) &&
            IsHex(line[p + 3])) {
          current += static_cast<char>(HexVal(line[p + 2]) * 16 + HexVal(line[p + 3]));
          p += 3;
        } else if (c == '\\' && p + 1 < end) {
          ++p;
          switch (line[p]) {
            case 'n': current += '\n'; break;
            case 'r': current += '\r'; break;
            case 't': current += '\t'; break;
            case 'b': current += '\b'; break;
            case 'a': current += '\a'; break;
            default: current += line[p]; break;
          }
        } else if (c == '"') {
          // A closing quote must be followed by a space or the end.
          if (p + 1 < end && !IsSpace(line[p + 1])) return false;
          done = true;
        } else {
          current += c;
        }
      } else if (insq) {
        if (p >= end) return false;
        const char c = line[p];
        if (c == '\\' && p + 1 < end && line[p + 1] == '\'') {
          ++p;
          current += '\'';
        } else if (c == '\'') {
          if (p + 1 < end && !IsSpace(line[p + 1])) return false;
          done = true;
        } else {
          current += c;
        }
      } else {
        if (p >= end) {
          done = true;
          break;
        }
        const char c = line[p];
        // As sdssplitargs: only these end a word; a vertical tab or form feed inside one
        // is part of it (isspace skips them only between words).
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\0') {
          done = true;
        } else if (c == '"') {
          inq = true;
        } else if (c == '\'') {
          insq = true;
        } else {
          current += c;
        }
      }
      if (p < end) ++p;
    }
    args_.push_back(std::move(current));
  }
}

void AppendSimple(std::string* out, std::string_view s) {
  out->push_back('+');
  out->append(s);
  out->append("\r\n", 2);
}

void AppendError(std::string* out, std::string_view msg) {
  out->push_back('-');
  const size_t start = out->size();
  out->append(msg);
  for (size_t k = start; k < out->size(); ++k) {
    if ((*out)[k] == '\r' || (*out)[k] == '\n') (*out)[k] = ' ';
  }
  out->append("\r\n", 2);
}

namespace {
void AppendNumberLine(std::string* out, char type, int64_t v) {
  char buf[24];
  buf[0] = type;
  auto [ptr, ec] = std::to_chars(buf + 1, buf + sizeof buf - 2, v);
  *ptr++ = '\r';
  *ptr++ = '\n';
  out->append(buf, static_cast<size_t>(ptr - buf));
}
}  // namespace

void AppendInteger(std::string* out, int64_t v) { AppendNumberLine(out, ':', v); }

void AppendBulkHeader(std::string* out, size_t len) {
  AppendNumberLine(out, '$', static_cast<int64_t>(len));
}

void AppendBulk(std::string* out, std::string_view s) {
  AppendBulkHeader(out, s.size());
  out->append(s);
  out->append("\r\n", 2);
}

void AppendNull(std::string* out, bool resp3) {
  if (resp3) {
    out->append("_\r\n", 3);
  } else {
    out->append("$-1\r\n", 5);
  }
}

void AppendMapHeader(std::string* out, size_t pairs, bool resp3) {
  if (resp3) {
    AppendNumberLine(out, '%', static_cast<int64_t>(pairs));
  } else {
    AppendNumberLine(out, '*', static_cast<int64_t>(2 * pairs));
  }
}

void AppendArrayHeader(std::string* out, size_t n) {
  AppendNumberLine(out, '*', static_cast<int64_t>(n));
}

void AppendSetHeader(std::string* out, size_t n, bool resp3) {
  AppendNumberLine(out, resp3 ? '~' : '*', static_cast<int64_t>(n));
}

}  // namespace nvmw::resp
