// RESP2 (the Redis serialization protocol, version 2): a resumable request parser and
// the reply encoders of the Redis-protocol server (docs/server.md). Requests are the
// same in RESP3; replies differ only in nulls and maps, which the encoders take a flag for.
//
// The parser accepts both request forms Redis accepts: multibulk ("*<n>\r\n" then n
// "$<len>\r\n<bytes>\r\n" arguments) and inline (one line of space-separated words, with
// Redis's double- and single-quote rules, as redis-cli and telnet send). It keeps its
// state between calls, so input may arrive split at any byte; it stops after each
// complete command, so the caller decides when to take the next one (pipelining with
// replies in order). Every length is checked against the limits before anything is
// allocated for it. A protocol error is final: the connection is answered
// "-ERR Protocol error: ..." and closed, as Redis does.
#ifndef NVMW_SERVER_RESP_H_
#define NVMW_SERVER_RESP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nvmw::resp {

struct ParserLimits {
  uint64_t max_bulk_bytes = 512ull << 20;  // largest argument ($<len>)
  size_t max_args = 1 << 20;               // most arguments in one command (*<n>)
  size_t max_inline_bytes = 64 * 1024;     // longest inline command line (Redis: 64 KB)
};

class Parser {
 public:
  enum class Result {
    kNeedMore,  // every byte given was consumed; the command is not complete yet
    kCommand,   // a command is complete: args() holds it (never empty)
    kError,     // protocol error (error() says which); the parser stays in error
  };

  explicit Parser(const ParserLimits& limits = ParserLimits()) : limits_(limits) {}

  // Consumes input from data[0, n) up to the end of the next complete command (or all of
  // it) and says how many bytes it used in *consumed. After kCommand, take args() and
  // call again with the rest of the input. Empty commands (an empty inline line, "*0")
  // are skipped, as Redis does.
  Result Parse(const char* data, size_t n, size_t* consumed);

  // While on, the caps Redis puts on a client that has not authenticated (a password is
  // set and not given yet): at most 10 arguments, each at most 16 KiB; more is a protocol
  // error ("unauthenticated multibulk length", "unauthenticated bulk length"), so such a
  // client cannot make the server hold a large request. Inline commands keep their own cap.
  // Set between commands (the server sets it before each Parse).
  void set_unauthenticated(bool on) { unauthenticated_ = on; }

  // The arguments of the last complete command. The caller may move strings out of it;
  // the next Parse clears it.
  std::vector<std::string>& args() { return args_; }
  // The message of a protocol error, e.g. "Protocol error: invalid bulk length".
  const std::string& error() const { return error_; }
  // Bytes held for the command being parsed (arguments so far and a partial line).
  size_t buffered_bytes() const { return buffered_; }

  // Zero-copy receive of a large argument: while the parser is inside an argument with at
  // least `min_bytes` still to come, returns where its next bytes go (in the argument's
  // own buffer) and in *room how many may be written there (at most the bytes still to
  // come); otherwise nullptr. After writing n <= *room bytes there (e.g. read() from the
  // socket), call BulkFilled(n); Parse then goes on after them.
  char* BulkSink(size_t min_bytes, size_t* room);
  void BulkFilled(size_t n);
  // The declared length of the argument being received, while inside one (its header
  // read, bytes still to come); 0 otherwise. The server classes a connection sending a
  // large argument as a batch connection by it.
  uint64_t bulk_in_progress() const { return state_ == State::kBulkData ? bulk_len_ : 0; }

 private:
  enum class State { kStart, kArrayLen, kBulkLen, kBulkData, kBulkCr, kBulkLf, kInline, kError };

  Result Fail(const char* msg);
  // Appends bytes up to '\n' to line_; true when the line is complete (the '\n' is
  // consumed and not stored). *i advances.
  bool ReadLine(const char* data, size_t n, size_t* i, size_t cap);
  // Splits an inline line into args_ (Redis's sdssplitargs rules); false on unbalanced quotes.
  bool SplitInline(std::string_view line);
  // Sizes the current argument's string to hold `want` more bytes (doubling, capped at
  // the declared length).
  void GrowBulk(size_t want);
  // Empties args_ for the next command. A vector grown past kKeepArgs (one command of
  // many arguments, up to max_args of them: 32 MiB of string headers) is freed rather
  // than kept for the life of the connection, as PendingCommand::Reset frees the key
  // commands' vectors.
  static constexpr size_t kKeepArgs = 1024;
  void ClearArgs();

  ParserLimits limits_;
  State state_ = State::kStart;
  std::vector<std::string> args_;
  std::string line_;        // partial "*<n>" / "$<len>" / inline line
  int64_t remaining_args_ = 0;
  uint64_t bulk_len_ = 0;     // declared length of the current argument
  uint64_t bulk_filled_ = 0;  // its bytes received so far
  uint64_t bulk_left_ = 0;    // bytes of the current argument still to come
  size_t buffered_ = 0;
  bool unauthenticated_ = false;
  std::string error_;
};

// Reply encoders: append one RESP2 value to *out.
void AppendSimple(std::string* out, std::string_view s);    // +s\r\n
void AppendError(std::string* out, std::string_view msg);   // -msg\r\n (CR/LF replaced)
void AppendInteger(std::string* out, int64_t v);            // :v\r\n
void AppendBulk(std::string* out, std::string_view s);      // $len\r\ns\r\n
void AppendBulkHeader(std::string* out, size_t len);        // $len\r\n
void AppendNull(std::string* out, bool resp3 = false);      // $-1\r\n (RESP3: _\r\n)
// A map of `pairs` key/value pairs: RESP3 %pairs\r\n, RESP2 a flat array *2pairs\r\n.
void AppendMapHeader(std::string* out, size_t pairs, bool resp3);
void AppendArrayHeader(std::string* out, size_t n);         // *n\r\n
// A set of n elements: RESP3 ~n\r\n, RESP2 an array *n\r\n.
void AppendSetHeader(std::string* out, size_t n, bool resp3);

}  // namespace nvmw::resp

#endif  // NVMW_SERVER_RESP_H_
