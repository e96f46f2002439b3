// The RESP2 parser: multibulk and inline commands, pipelining, input split at every byte
// boundary, the caps (bulk length, argument count, inline line) checked before anything
// is allocated, and malformed input answered with Redis's protocol errors; the encoders.
#include "server/resp.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace nvmw::resp {
namespace {

using Args = std::vector<std::string>;

// Feeds `input` in pieces of at most `chunk` bytes; returns the commands parsed and, on
// a protocol error, its message in *error.
std::vector<Args> ParseAll(const std::string& input, size_t chunk, std::string* error = nullptr,
                           const ParserLimits& limits = ParserLimits()) {
  Parser p(limits);
  std::vector<Args> out;
  size_t pos = 0;
  while (pos < input.size()) {
    const size_t n = std::min(chunk, input.size() - pos);
    size_t off = 0;
    for (;;) {
      size_t used = 0;
      const Parser::Result r = p.Parse(input.data() + pos + off, n - off, &used);
      off += used;
      if (r == Parser::Result::kCommand) {
        out.push_back(p.args());
        continue;
      }
      if (r == Parser::Result::kError) {
        if (error != nullptr) *error = p.error();
        return out;
      }
      EXPECT_EQ(off, n);  // kNeedMore consumes everything
      break;
    }
    pos += n;
  }
  return out;
}

std::string Multibulk(const Args& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

TEST(RespParserTest, MultibulkPipelineAtEveryChunkSize) {
  const std::vector<Args> expected = {
      {"SET", "key", std::string("va\r\nl\0ue", 9)},
      {"GET", "key"},
      {"MSET", "", "empty-key", "k2", std::string(3000, 'x')},
      {"PING"},
  };
  std::string input;
  for (const auto& a : expected) input += Multibulk(a);
  for (size_t chunk = 1; chunk <= input.size(); ++chunk) {
    std::string error;
    EXPECT_EQ(ParseAll(input, chunk, &error), expected) << "chunk " << chunk;
    EXPECT_EQ(error, "");
  }
}

TEST(RespParserTest, SplitAtEveryByteBoundary) {
  const std::string input = Multibulk({"SET", "k", "hello world"}) + "PING\r\n" +
                            Multibulk({"GET", "k"}) + "ECHO \"a b\\x41\"\n";
  const std::vector<Args> expected = {{"SET", "k", "hello world"}, {"PING"}, {"GET", "k"}, {"ECHO", "a bA"}};
  for (size_t cut = 0; cut <= input.size(); ++cut) {
    Parser p;
    std::vector<Args> got;
    for (const std::string& part : {input.substr(0, cut), input.substr(cut)}) {
      size_t off = 0;
      for (;;) {
        size_t used = 0;
        const Parser::Result r = p.Parse(part.data() + off, part.size() - off, &used);
        off += used;
        ASSERT_NE(r, Parser::Result::kError) << p.error() << " cut " << cut;
        if (r == Parser::Result::kNeedMore) break;
        got.push_back(p.args());
      }
    }
    EXPECT_EQ(got, expected) << "cut " << cut;
  }
}

// A large argument received partly through Parse and partly written straight into
// BulkSink() (as the server reads big values) comes out byte for byte.
TEST(RespParserTest, BulkSinkReceivesALargeArgumentInPlace) {
  std::string value(300000, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7 + 3);
  const std::string input = Multibulk({"SET", "k", value}) + Multibulk({"PING"});
  Parser p;
  size_t pos = 0, used = 0;
  // The header and the first 1000 value bytes through Parse.
  const size_t first = input.find(value.substr(0, 16)) + 1000;
  ASSERT_EQ(p.Parse(input.data(), first, &used), Parser::Result::kNeedMore);
  pos = first;
  size_t room = 0;
  EXPECT_EQ(p.BulkSink(1 << 20, &room), nullptr);  // less than that still to come
  int sinks = 0;
  while (char* sink = p.BulkSink(4096, &room)) {
    ASSERT_GT(room, 0u);
    const size_t n = std::min<size_t>(room, 70000);  // partial "reads"
    std::memcpy(sink, input.data() + pos, n);
    p.BulkFilled(n);
    pos += n;
    ++sinks;
  }
  EXPECT_GT(sinks, 1);
  std::vector<Args> got;
  for (;;) {
    const Parser::Result r = p.Parse(input.data() + pos, input.size() - pos, &used);
    pos += used;
    ASSERT_NE(r, Parser::Result::kError) << p.error();
    if (r == Parser::Result::kNeedMore) break;
    got.push_back(p.args());
  }
  EXPECT_EQ(got, (std::vector<Args>{{"SET", "k", value}, {"PING"}}));
}

// Every argument keeps exactly its declared length, whatever the growth of the string
// holding it (sizes around the short-string buffer, its doubling, and past 1 MiB, where the
// argument grows as its bytes arrive), parsed whole and byte by byte, and with
// bulk_in_progress() telling the declared length while inside the argument.
TEST(RespParserTest, ArgumentsKeepTheirDeclaredLength) {
  for (size_t len : {0u, 1u, 15u, 16u, 17u, 29u, 30u, 31u, 64u, 65536u, (1u << 20) + 5u, (3u << 20) + 1u}) {
    std::string arg(len, '\0');
    for (size_t i = 0; i < len; ++i) arg[i] = static_cast<char>('a' + i % 26);
    const std::string input = Multibulk({"SET", arg, arg});
    Parser whole;
    size_t used = 0;
    ASSERT_EQ(whole.Parse(input.data(), input.size(), &used), Parser::Result::kCommand) << len;
    EXPECT_EQ(whole.args(), (Args{"SET", arg, arg})) << len;
    Parser split;
    bool seen_in_progress = len == 0;
    for (size_t i = 0; i < input.size(); ++i) {
      const Parser::Result r = split.Parse(input.data() + i, 1, &used);
      ASSERT_NE(r, Parser::Result::kError) << split.error();
      if (split.bulk_in_progress() == len) seen_in_progress = true;
      if (r == Parser::Result::kCommand) {
        ASSERT_EQ(i + 1, input.size());
        EXPECT_EQ(split.args(), (Args{"SET", arg, arg})) << len;
      }
    }
    EXPECT_TRUE(seen_in_progress) << len;
    EXPECT_EQ(split.bulk_in_progress(), 0u);
  }
}

TEST(RespParserTest, InlineCommandsWithRedisQuoting) {
  std::string error;
  EXPECT_EQ(ParseAll("PING\r\n", 100), (std::vector<Args>{{"PING"}}));
  EXPECT_EQ(ParseAll("  set  a   b \n", 100), (std::vector<Args>{{"set", "a", "b"}}));
  EXPECT_EQ(ParseAll("set \"a b\" 'c d' \"\\n\\t\\\"\" 'it\\'s'\r\n", 100),
            (std::vector<Args>{{"set", "a b", "c d", "\n\t\"", "it's"}}));
  EXPECT_EQ(ParseAll("\r\n\n  \r\nPING\r\n", 100), (std::vector<Args>{{"PING"}}));  // empty lines skipped
  EXPECT_EQ(ParseAll("set \"unbalanced\r\n", 100, &error), std::vector<Args>{});
  EXPECT_EQ(error, "Protocol error: unbalanced quotes in request");
  error.clear();
  ParseAll("set \"a\"b\r\n", 100, &error);  // a closing quote must end the word
  EXPECT_EQ(error, "Protocol error: unbalanced quotes in request");
}

// As Redis's sdssplitargs: a vertical tab or form feed is skipped between words but does
// not end one (only space, tab, CR, LF do); after a closing quote any of the six may follow.
TEST(RespParserTest, InlineWordsEndOnlyAtSpaceTabCrLf) {
  EXPECT_EQ(ParseAll("ECHO a\vb\r\n", 100), (std::vector<Args>{{"ECHO", "a\vb"}}));
  EXPECT_EQ(ParseAll("ECHO a\fb c\r\n", 100), (std::vector<Args>{{"ECHO", "a\fb", "c"}}));
  EXPECT_EQ(ParseAll("\v ECHO \f\va\tb\r\n", 100), (std::vector<Args>{{"ECHO", "a", "b"}}));
  EXPECT_EQ(ParseAll("ECHO \"a\"\vb\r\n", 100), (std::vector<Args>{{"ECHO", "a", "b"}}));
}

TEST(RespParserTest, EmptyArraysAreSkipped) {
  EXPECT_EQ(ParseAll("*0\r\n*-1\r\n" + Multibulk({"PING"}), 3), (std::vector<Args>{{"PING"}}));
}

TEST(RespParserTest, BulkLengthCapCheckedBeforeAllocation) {
  ParserLimits limits;
  limits.max_bulk_bytes = 10;
  std::string error;
  EXPECT_EQ(ParseAll(Multibulk({"SET", "k", std::string(10, 'x')}), 7, &error, limits).size(), 1u);
  EXPECT_EQ(error, "");
  // Declares 2^62 bytes: refused from the header alone (nothing is reserved for it).
  Parser p(limits);
  const std::string huge = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4611686018427387904\r\n";
  size_t used = 0;
  ASSERT_EQ(p.Parse(huge.data(), huge.size(), &used), Parser::Result::kError);
  EXPECT_NE(p.error().find("invalid bulk length"), std::string::npos) << p.error();
  EXPECT_LT(p.buffered_bytes(), 64u);
  error.clear();
  ParseAll(Multibulk({"SET", "k", std::string(11, 'x')}), 100, &error, limits);
  EXPECT_NE(error.find("Protocol error: invalid bulk length"), std::string::npos) << error;
}

TEST(RespParserTest, ArgumentCountCap) {
  ParserLimits limits;
  limits.max_args = 3;
  std::string error;
  EXPECT_EQ(ParseAll(Multibulk({"SET", "k", "v"}), 5, &error, limits).size(), 1u);
  ParseAll("*1000000000\r\n", 5, &error, limits);
  EXPECT_NE(error.find("too many arguments"), std::string::npos) << error;
  error.clear();
  ParseAll("a b c d\r\n", 5, &error, limits);  // the inline form too
  EXPECT_NE(error.find("too many arguments"), std::string::npos) << error;
}

// Before AUTH, Redis's caps: 10 arguments, 16 KiB each (the inline form keeps its own
// cap); lifted once the flag is off.
TEST(RespParserTest, UnauthenticatedCaps) {
  auto parse = [](const std::string& input, bool unauthenticated, std::string* error) {
    Parser p;
    p.set_unauthenticated(unauthenticated);
    size_t used = 0;
    const Parser::Result r = p.Parse(input.data(), input.size(), &used);
    *error = r == Parser::Result::kError ? p.error() : "";
    return r;
  };
  std::string error;
  EXPECT_EQ(parse(Multibulk(Args(10, "a")), true, &error), Parser::Result::kCommand);
  EXPECT_EQ(parse(Multibulk({"AUTH", std::string(16384, 'p')}), true, &error), Parser::Result::kCommand);
  EXPECT_EQ(parse("*11\r\n", true, &error), Parser::Result::kError);
  EXPECT_EQ(error, "Protocol error: unauthenticated multibulk length");
  EXPECT_EQ(parse("*2\r\n$4\r\nAUTH\r\n$16385\r\n", true, &error), Parser::Result::kError);
  EXPECT_EQ(error, "Protocol error: unauthenticated bulk length");
  EXPECT_EQ(parse("AUTH a b c d e f g h i j k\r\n", true, &error), Parser::Result::kCommand);
  EXPECT_EQ(parse(Multibulk(Args(11, "a")), false, &error), Parser::Result::kCommand);
  EXPECT_EQ(parse(Multibulk({"SET", "k", std::string(16385, 'v')}), false, &error), Parser::Result::kCommand);
}

TEST(RespParserTest, InlineLineCap) {
  ParserLimits limits;
  limits.max_inline_bytes = 16;
  std::string error;
  EXPECT_EQ(ParseAll("0123456789abcdef\r\n", 4, &error, limits).size(), 0u);  // 17 with the \r
  EXPECT_EQ(error, "Protocol error: too big inline request");
  error.clear();
  EXPECT_EQ(ParseAll("0123456789abcde\n", 4, &error, limits).size(), 1u);
  EXPECT_EQ(error, "");
  // A line that never ends is refused as soon as it passes the cap.
  Parser p(limits);
  const std::string endless(1000, 'a');
  size_t used = 0;
  EXPECT_EQ(p.Parse(endless.data(), endless.size(), &used), Parser::Result::kError);
}

TEST(RespParserTest, MalformedInputGivesRedisProtocolErrors) {
  const std::pair<std::string, std::string> cases[] = {
      {"*x\r\n", "Protocol error: invalid multibulk length"},
      {"*1\n", "Protocol error: invalid multibulk length"},
      {"*12345678901234567890123456789012345\r\n", "Protocol error: too big mbulk count string"},
      {"*1\r\n+PING\r\n", "Protocol error: expected '$', got '+'"},
      {"*1\r\n\x01", "Protocol error: expected '$', got '\\x01'"},
      {"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$abc\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$4\r\nPINGxx", "Protocol error: expected CRLF after a bulk argument"},
      {"*1\r\n$4\r\nPING\rx", "Protocol error: expected CRLF after a bulk argument"},
  };
  for (const auto& [input, message] : cases) {
    for (size_t chunk : {size_t{1}, size_t{2}, input.size()}) {
      std::string error;
      EXPECT_TRUE(ParseAll(input, chunk, &error).empty()) << input;
      EXPECT_EQ(error, message) << "input " << input << " chunk " << chunk;
    }
  }
  // An error is final.
  Parser p;
  size_t used = 0;
  ASSERT_EQ(p.Parse("*x\r\n", 4, &used), Parser::Result::kError);
  EXPECT_EQ(p.Parse("PING\r\n", 6, &used), Parser::Result::kError);
  EXPECT_EQ(used, 0u);
}

TEST(RespEncodeTest, Replies) {
  std::string out;
  AppendSimple(&out, "OK");
  AppendError(&out, "ERR bad\r\nthing");
  AppendInteger(&out, -42);
  AppendBulk(&out, std::string("a\0b", 3));
  AppendNull(&out);
  AppendArrayHeader(&out, 2);
  AppendBulkHeader(&out, 5);
  EXPECT_EQ(out, std::string("+OK\r\n-ERR bad  thing\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n$5\r\n", 50));
}

// A command of many arguments does not leave its argument vector with the connection:
// the next command starts from a small one (otherwise each idle connection that once
// sent max_args arguments, an unknown command with a million of them say, would keep
// 32 MiB).
TEST(RespParserTest, ManyArgumentsAreNotKeptForTheNextCommand) {
  Parser p{ParserLimits()};
  const std::string big = Multibulk(Args(200000, "k"));
  size_t used = 0;
  ASSERT_EQ(p.Parse(big.data(), big.size(), &used), Parser::Result::kCommand);
  ASSERT_EQ(used, big.size());
  ASSERT_EQ(p.args().size(), 200000u);
  const std::string ping = Multibulk({"PING"});
  ASSERT_EQ(p.Parse(ping.data(), ping.size(), &used), Parser::Result::kCommand);
  EXPECT_EQ(p.args(), Args({"PING"}));
  EXPECT_LE(p.args().capacity(), 1024u);
}

}  // namespace
}  // namespace nvmw::resp
