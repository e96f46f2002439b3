// The Redis-protocol server's commands (docs/server.md, "Commands"): the command table
// (names, arity, flags as COMMAND reports them), authentication, the connection and
// introspection commands answered on the io thread, and the key commands, which become
// middleware requests submitted with SubmitOrRun one key after the other.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "nvmw/stats.h"
#include "server/server_impl.h"
#include "util/clock.h"

namespace nvmw {

namespace {

// The version reported to clients as redis_version: the Redis command set and replies
// this server follows (clients pick features by it).
constexpr const char* kRedisVersion = "7.0.0";
constexpr const char* kNvmwVersion = "0.1.0";

enum class Cmd {
  kGet, kSet, kDel, kExists, kMget, kMset, kPing, kEcho, kInfo, kDbsize, kSelect, kQuit,
  kAuth, kHello, kClient, kCommand, kConfig, kTime, kNvmwClass, kNvmwStats,
};

struct CommandSpec {
  std::string_view name;  // lower case
  Cmd cmd;
  int arity;              // Redis convention: n exact, -n at least n (name included)
  std::array<std::string_view, 6> flags;
  int first_key, last_key, step;
  std::array<std::string_view, 3> categories;  // ACL categories
  std::array<std::string_view, 2> key_flags;   // what the command does to its keys
};

// Flags, ACL categories and key flags as Redis 7.0 reports them for its commands of the
// same name (CLIENT and CONFIG are containers there: no flags of their own).
constexpr CommandSpec kCommands[] = {
    {"get", Cmd::kGet, 2, {"readonly", "fast"}, 1, 1, 1, {"@read", "@string", "@fast"}, {"RO", "access"}},
    {"set", Cmd::kSet, -3, {"write", "denyoom"}, 1, 1, 1, {"@write", "@string", "@slow"}, {"OW", "update"}},
    {"del", Cmd::kDel, -2, {"write"}, 1, -1, 1, {"@keyspace", "@write", "@slow"}, {"RM", "delete"}},
    {"exists", Cmd::kExists, -2, {"readonly", "fast"}, 1, -1, 1, {"@keyspace", "@read", "@fast"}, {"RO"}},
    {"mget", Cmd::kMget, -2, {"readonly", "fast"}, 1, -1, 1, {"@read", "@string", "@fast"}, {"RO", "access"}},
    {"mset", Cmd::kMset, -3, {"write", "denyoom"}, 1, -1, 2, {"@write", "@string", "@slow"}, {"OW", "update"}},
    {"ping", Cmd::kPing, -1, {"fast"}, 0, 0, 0, {"@fast", "@connection"}, {}},
    {"echo", Cmd::kEcho, 2, {"loading", "stale", "fast"}, 0, 0, 0, {"@fast", "@connection"}, {}},
    {"info", Cmd::kInfo, -1, {"loading", "stale"}, 0, 0, 0, {"@slow", "@dangerous"}, {}},
    {"dbsize", Cmd::kDbsize, 1, {"readonly", "fast"}, 0, 0, 0, {"@keyspace", "@read", "@fast"}, {}},
    {"select", Cmd::kSelect, 2, {"loading", "stale", "fast"}, 0, 0, 0, {"@fast", "@connection"}, {}},
    {"quit", Cmd::kQuit, -1, {"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, 0, 0, 0,
     {"@fast", "@connection"}, {}},
    {"auth", Cmd::kAuth, -2, {"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, 0, 0, 0,
     {"@fast", "@connection"}, {}},
    {"hello", Cmd::kHello, -1, {"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, 0, 0, 0,
     {"@fast", "@connection"}, {}},
    {"client", Cmd::kClient, -2, {}, 0, 0, 0, {"@slow"}, {}},
    {"command", Cmd::kCommand, -1, {"loading", "stale"}, 0, 0, 0, {"@slow", "@connection"}, {}},
    {"config", Cmd::kConfig, -2, {}, 0, 0, 0, {"@slow"}, {}},
    {"time", Cmd::kTime, 1, {"loading", "stale", "fast"}, 0, 0, 0, {"@fast"}, {}},
    {"nvmw.class", Cmd::kNvmwClass, -1, {"fast"}, 0, 0, 0, {"@fast", "@connection"}, {}},
    {"nvmw.stats", Cmd::kNvmwStats, 1, {"loading", "stale"}, 0, 0, 0, {"@slow"}, {}},
};

// COMMAND DOCS: what redis-cli shows as a command's help and hints. Summary, since, group,
// complexity and arguments are Redis 7.0's for the commands Redis has, but for SET, whose
// options nvmw refuses (its arguments are the key and the value); no history, and no
// subcommands for the containers. An argument is answered as Redis answers it: its name and
// type, then only the fields it has.
struct ArgDoc {
  std::string_view name, type;
  int key_spec_index = -1;
  std::string_view token = {}, since = {};
  std::array<std::string_view, 2> flags = {};  // "optional", "multiple", "multiple_token"
  std::span<const ArgDoc> args = {};           // a block's or a oneof's
};

struct CommandDoc {
  std::string_view name, summary, since, group, complexity;
  std::span<const ArgDoc> args = {};
};

constexpr ArgDoc kKeyArg[] = {{.name = "key", .type = "key", .key_spec_index = 0}};
constexpr ArgDoc kKeysArg[] = {{.name = "key", .type = "key", .key_spec_index = 0, .flags = {"multiple"}}};
constexpr ArgDoc kKeyValueArgs[] = {{.name = "key", .type = "key", .key_spec_index = 0},
                                    {.name = "value", .type = "string"}};
constexpr ArgDoc kMsetArgs[] = {{.name = "key_value", .type = "block", .flags = {"multiple"}, .args = kKeyValueArgs}};
constexpr ArgDoc kPingArgs[] = {{.name = "message", .type = "string", .flags = {"optional"}}};
constexpr ArgDoc kEchoArgs[] = {{.name = "message", .type = "string"}};
constexpr ArgDoc kInfoArgs[] = {{.name = "section", .type = "string", .flags = {"optional", "multiple"}}};
constexpr ArgDoc kSelectArgs[] = {{.name = "index", .type = "integer"}};
constexpr ArgDoc kAuthArgs[] = {{.name = "username", .type = "string", .since = "6.0.0", .flags = {"optional"}},
                                {.name = "password", .type = "string"}};
constexpr ArgDoc kHelloAuthArgs[] = {{.name = "username", .type = "string"}, {.name = "password", .type = "string"}};
constexpr ArgDoc kHelloBlockArgs[] = {
    {.name = "protover", .type = "integer"},
    {.name = "username_password", .type = "block", .token = "AUTH", .flags = {"optional"}, .args = kHelloAuthArgs},
    {.name = "clientname", .type = "string", .token = "SETNAME", .flags = {"optional"}},
};
constexpr ArgDoc kHelloArgs[] = {{.name = "arguments", .type = "block", .flags = {"optional"}, .args = kHelloBlockArgs}};
constexpr ArgDoc kNvmwClassChoices[] = {
    {.name = "interactive", .type = "pure-token", .token = "INTERACTIVE"},
    {.name = "batch", .type = "pure-token", .token = "BATCH"},
    {.name = "auto", .type = "pure-token", .token = "AUTO"},
};
constexpr ArgDoc kNvmwClassArgs[] = {
    {.name = "class", .type = "oneof", .flags = {"optional"}, .args = kNvmwClassChoices}};

constexpr CommandDoc kCommandDocs[] = {
    {"get", "Get the value of a key", "1.0.0", "string", "O(1)", kKeyArg},
    {"set", "Set the string value of a key", "1.0.0", "string", "O(1)", kKeyValueArgs},
    {"del", "Delete a key", "1.0.0", "generic",
     "O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a "
     "string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, "
     "sorted set or hash. Removing a single key that holds a string value is O(1).",
     kKeysArg},
    {"exists", "Determine if a key exists", "1.0.0", "generic", "O(N) where N is the number of keys to check.",
     kKeysArg},
    {"mget", "Get the values of all the given keys", "1.0.0", "string",
     "O(N) where N is the number of keys to retrieve.", kKeysArg},
    {"mset", "Set multiple keys to multiple values", "1.0.1", "string", "O(N) where N is the number of keys to set.",
     kMsetArgs},
    {"ping", "Ping the server", "1.0.0", "connection", "O(1)", kPingArgs},
    {"echo", "Echo the given string", "1.0.0", "connection", "O(1)", kEchoArgs},
    {"info", "Get information and statistics about the server", "1.0.0", "server", "O(1)", kInfoArgs},
    {"dbsize", "Return the number of keys in the selected database", "1.0.0", "server", "O(1)"},
    {"select", "Change the selected database for the current connection", "1.0.0", "connection", "O(1)",
     kSelectArgs},
    {"quit", "Close the connection", "1.0.0", "connection", "O(1)"},
    {"auth", "Authenticate to the server", "1.0.0", "connection",
     "O(N) where N is the number of passwords defined for the user", kAuthArgs},
    {"hello", "Handshake with Redis", "6.0.0", "connection", "O(1)", kHelloArgs},
    {"client", "A container for client connection commands", "2.4.0", "connection", "Depends on subcommand."},
    {"command", "Get array of Redis command details", "2.8.13", "server",
     "O(N) where N is the total number of Redis commands"},
    {"config", "A container for server configuration commands", "2.0.0", "server", "Depends on subcommand."},
    {"time", "Return the current server time", "2.6.0", "server", "O(1)"},
    {"nvmw.class", "Set or show the connection's request class (interactive, batch or auto by value size)",
     kNvmwVersion, "connection", "O(1)", kNvmwClassArgs},
    {"nvmw.stats", "Return the middleware's last window, state, threads, queues and limits as JSON", kNvmwVersion,
     "server", "O(1)"},
};
constexpr bool DocsFollowCommands() {
  if (std::size(kCommandDocs) != std::size(kCommands)) return false;
  for (size_t i = 0; i < std::size(kCommands); ++i) {
    if (kCommandDocs[i].name != kCommands[i].name) return false;
  }
  return true;
}
static_assert(DocsFollowCommands(), "kCommandDocs names kCommands's commands in their order");

void AppendArgDocs(std::string* out, std::span<const ArgDoc> args, bool resp3) {
  resp::AppendArrayHeader(out, args.size());
  for (const ArgDoc& a : args) {
    const bool nested = a.type == "block" || a.type == "oneof";
    const size_t nflags = (a.flags[0].empty() ? 0 : 1) + (a.flags[1].empty() ? 0 : 1);
    resp::AppendMapHeader(out,
                          2 + (a.key_spec_index >= 0) + !a.token.empty() + !a.since.empty() + (nflags > 0) + nested,
                          resp3);
    resp::AppendBulk(out, "name");
    resp::AppendBulk(out, a.name);
    resp::AppendBulk(out, "type");
    resp::AppendBulk(out, a.type);
    if (a.key_spec_index >= 0) {
      resp::AppendBulk(out, "key_spec_index");
      resp::AppendInteger(out, a.key_spec_index);
    }
    if (!a.token.empty()) {
      resp::AppendBulk(out, "token");
      resp::AppendBulk(out, a.token);
    }
    if (!a.since.empty()) {
      resp::AppendBulk(out, "since");
      resp::AppendBulk(out, a.since);
    }
    if (nflags > 0) {
      resp::AppendBulk(out, "flags");
      resp::AppendSetHeader(out, nflags, resp3);
      for (std::string_view f : a.flags) {
        if (!f.empty()) resp::AppendSimple(out, f);
      }
    }
    if (nested) {
      resp::AppendBulk(out, "arguments");
      AppendArgDocs(out, a.args, resp3);
    }
  }
}

// One name and its documentation, a pair of COMMAND DOCS's map.
void AppendCommandDoc(std::string* out, const CommandDoc& d, bool resp3) {
  resp::AppendBulk(out, d.name);
  resp::AppendMapHeader(out, 4 + !d.args.empty(), resp3);
  resp::AppendBulk(out, "summary");
  resp::AppendBulk(out, d.summary);
  resp::AppendBulk(out, "since");
  resp::AppendBulk(out, d.since);
  resp::AppendBulk(out, "group");
  resp::AppendBulk(out, d.group);
  resp::AppendBulk(out, "complexity");
  resp::AppendBulk(out, d.complexity);
  if (!d.args.empty()) {
    resp::AppendBulk(out, "arguments");
    AppendArgDocs(out, d.args, resp3);
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// ASCII only, as Redis's command lookup (no locale, no call per byte: this runs for
// every command).
char AsciiLower(char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch + ('a' - 'A')) : ch; }

// `lower` is already lower case.
bool EqualsNoCase(std::string_view lower, std::string_view s) {
  if (lower.size() != s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (lower[i] != AsciiLower(s[i])) return false;
  }
  return true;
}

const CommandSpec* Find(std::string_view name) {
  for (const CommandSpec& c : kCommands) {
    if (EqualsNoCase(c.name, name)) return &c;
  }
  return nullptr;
}

// A middleware status as a Redis error reply (without the leading '-').
std::string ErrorFor(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOverloaded:
      return "OVERLOADED " + s.message();
    case Status::Code::kNoSpace:
      return "OOM " + s.message();
    case Status::Code::kShutdown:
      return "ERR server is shutting down";
    case Status::Code::kInvalidArgument:
      return "ERR invalid argument: " + s.message();
    default:
      return std::string("ERR ") + Status::CodeName(s.code()) + ": " + s.message();
  }
}

// One command's COMMAND INFO entry. Under RESP3 the flags, the categories and the three
// empty lists are sets (~), as Redis 7 sends them.
void AppendCommandEntry(std::string* out, const CommandSpec& c, bool resp3) {
  auto append_set = [&](const auto& words) {
    size_t n = 0;
    for (std::string_view w : words) n += w.empty() ? 0 : 1;
    resp::AppendSetHeader(out, n, resp3);
    for (std::string_view w : words) {
      if (!w.empty()) resp::AppendSimple(out, w);
    }
  };
  resp::AppendArrayHeader(out, 10);
  resp::AppendBulk(out, c.name);
  resp::AppendInteger(out, c.arity);
  append_set(c.flags);
  resp::AppendInteger(out, c.first_key);
  resp::AppendInteger(out, c.last_key);
  resp::AppendInteger(out, c.step);
  append_set(c.categories);
  for (int k = 0; k < 3; ++k) resp::AppendSetHeader(out, 0, resp3);  // tips, key specs, subcommands
}

// Redis's glob matching (util.c, stringmatchlen, as in Redis 7.0), so CONFIG GET and
// COMMAND LIST FILTERBY PATTERN match what Redis matches: `*`, `?`, `[abc]`, `[^abc]`,
// ranges `[a-z]` either way round, `\` taking the next character as it is (in a bracket
// too). Not fnmatch's: `!` does not negate, a `[` left open closes at the pattern's end,
// `[]` matches nothing. Bytes past either end read as NUL, as in the C strings Redis
// matches; `nocase` folds ASCII letters.
char ByteAt(std::string_view s, size_t i) { return i < s.size() ? s[i] : '\0'; }

int Fold(char ch, bool nocase) {
  int v = static_cast<signed char>(ch);  // Redis compares chars, signed
  return nocase && v >= 'A' && v <= 'Z' ? v + ('a' - 'A') : v;
}

bool GlobMatchFrom(std::string_view pat, size_t pi, std::string_view str, size_t si, bool nocase,
                   bool* skip_longer) {
  const size_t pn = pat.size(), sn = str.size();
  while (pi < pn && si < sn) {
    switch (pat[pi]) {
      case '*':
        while (pi < pn && ByteAt(pat, pi + 1) == '*') ++pi;
        if (pn - pi == 1) return true;
        for (; si < sn; ++si) {
          if (GlobMatchFrom(pat, pi + 1, str, si, nocase, skip_longer)) return true;
          // The rest of the pattern matches nowhere in the rest of the string: a longer
          // match for an earlier `*` cannot help (Redis's guard against exponential time).
          if (*skip_longer) return false;
        }
        *skip_longer = true;
        return false;
      case '?':
        ++si;
        break;
      case '[': {
        ++pi;
        const bool negate = ByteAt(pat, pi) == '^';
        if (negate) ++pi;
        bool match = false;
        for (;; ++pi) {
          if (ByteAt(pat, pi) == '\\' && pi + 2 <= pn) {
            ++pi;
            if (pat[pi] == str[si]) match = true;
          } else if (ByteAt(pat, pi) == ']') {
            break;
          } else if (pi >= pn) {  // left open: the bracket ends with the pattern
            --pi;
            break;
          } else if (pi + 3 <= pn && pat[pi + 1] == '-') {
            int lo = static_cast<signed char>(pat[pi]), hi = static_cast<signed char>(pat[pi + 2]);
            if (lo > hi) std::swap(lo, hi);
            const int ch = Fold(str[si], nocase);
            lo = Fold(static_cast<char>(lo), nocase);
            hi = Fold(static_cast<char>(hi), nocase);
            pi += 2;
            if (ch >= lo && ch <= hi) match = true;
          } else if (Fold(pat[pi], nocase) == Fold(str[si], nocase)) {
            match = true;
          }
        }
        if (negate) match = !match;
        if (!match) return false;
        ++si;
        break;
      }
      case '\\':
        if (pi + 2 <= pn) ++pi;
        [[fallthrough]];
      default:
        if (Fold(pat[pi], nocase) != Fold(str[si], nocase)) return false;
        ++si;
        break;
    }
    ++pi;
    if (si == sn) {
      while (ByteAt(pat, pi) == '*') ++pi;
      break;
    }
  }
  return pi == pn && si == sn;
}

bool GlobMatch(std::string_view pattern, std::string_view str, bool nocase) {
  bool skip_longer = false;
  return GlobMatchFrom(pattern, 0, str, 0, nocase, &skip_longer);
}

void AppendJsonNumber(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, ptr);
}

template <typename T>
void AppendJsonValue(std::string* out, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    AppendJsonNumber(out, v);
  } else {
    out->append(std::to_string(v));
  }
}

void AppendClassJson(std::string* out, const ClassStats& s) {
  out->push_back('{');
  bool first = true;
  for (const ClassStatField& f : kClassStatFields) {
    if (!first) out->push_back(',');
    first = false;
    out->push_back('"');
    out->append(f.name);
    out->append("\":");
    std::visit([&](auto member) { AppendJsonValue(out, s.*member); }, f.member);
  }
  out->push_back('}');
}

const char* ClassName(RequestClass c) {
  switch (c) {
    case RequestClass::kInteractive: return "interactive";
    case RequestClass::kBatch: return "batch";
    default: return "auto";
  }
}

// An integer argument by Redis's rules (string2ll): optional '-', digits, no leading
// zero and no "-0", nothing else (no '+', no spaces), within int64.
bool ParseRedisInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  if (s == "0") {
    *out = 0;
    return true;
  }
  const size_t digits = s[0] == '-' ? 1 : 0;
  if (s.size() == digits || s[digits] < '1' || s[digits] > '9') return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// An argument as Redis prints it into an error with %.Ns: at most `max` bytes, up to its
// first NUL.
std::string CPrefix(std::string_view s, size_t max) { return std::string(s.substr(0, std::min(s.find('\0'), max))); }

// A container command's subcommands (lower case) with their arities as Redis gives them:
// n, exactly n arguments; -n, at least n.
using SubcommandTable = std::span<const std::pair<std::string_view, int>>;

// Redis 7.0's error for a container command (`name`: COMMAND, CONFIG, CLIENT) whose
// subcommand args[1] is not in `table` or has the wrong number of arguments; empty when
// the call fits.
std::string SubcommandError(const std::vector<std::string>& args, std::string_view name,
                            SubcommandTable table) {
  const std::string sub = Lower(args[1]);
  const auto known = std::find_if(table.begin(), table.end(), [&](const auto& s) { return s.first == sub; });
  if (known == table.end()) {
    return "ERR unknown subcommand '" + CPrefix(args[1], 128) + "'. Try " + std::string(name) + " HELP.";
  }
  const int argc = static_cast<int>(std::min<size_t>(args.size(), 1 << 30));
  if ((known->second > 0 && argc != known->second) || (known->second < 0 && argc < -known->second)) {
    return "ERR wrong number of arguments for '" + Lower(name) + "|" + sub + "' command";
  }
  return "";
}

// The error for a command not in the table, worded and cut as Redis 7 cuts it
// (processCommand): the name to 128 bytes, then the arguments, each quoted and followed by
// a space, while the list is under 128 bytes, each cut to the bytes left of those 128. As
// Redis prints them with %s, a name or an argument ends at its first NUL byte.
std::string UnknownCommandError(const std::vector<std::string>& args) {
  std::string list;
  for (size_t i = 1; i < args.size() && list.size() < 128; ++i) {
    const size_t room = 128 - list.size();
    list += '\'';
    list += CPrefix(args[i], room);
    list += "' ";
  }
  std::string msg = "ERR unknown command '";
  msg += CPrefix(args[0], 128);
  msg += "', with args beginning with: ";
  msg += list;
  return msg;
}

// INFO's run_id: 40 hex digits naming this run of the server (Redis draws them at
// random; here they are mixed from the process id and the start time, which differ from
// one run to the next).
std::string RunId(int64_t start_ns) {
  uint64_t x = static_cast<uint64_t>(start_ns) ^ (static_cast<uint64_t>(::getpid()) << 40);
  std::string out;
  while (out.size() < 40) {
    x += 0x9e3779b97f4a7c15ULL;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(z));
    out.append(buf, std::min<size_t>(16, 40 - out.size()));
  }
  return out;
}

// INFO's executable: the program this process runs (for `nvmw serve`, the Python
// interpreter), empty where /proc does not say.
std::string Executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf);
  return n > 0 && static_cast<size_t>(n) < sizeof buf ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool ValidClientName(std::string_view n) {
  for (char ch : n) {
    if (ch < '!' || ch > '~') return false;
  }
  return true;
}

}  // namespace

// ---- key commands: one middleware request per key ----

void Server::Impl::Continue(IoThread* io, Conn* c) {
  PendingCommand& p = *c->pending;
  while (p.next < p.total) {
    if (p.kind == PendingCommand::Kind::kMget && c->out_bytes + p.held >= options.max_output_bytes) {
      // The reply reached the output cap: queue what was read and read no further key
      // until the client has taken the output below the cap (Flush resumes).
      QueueValues(c, p, p.next);
      if (c->out_bytes >= options.max_output_bytes) return;
    }
    const bool gather = Gathering(io);
    Request r;
    r.cls = c->cls;
    switch (p.kind) {
      case PendingCommand::Kind::kGet:
      case PendingCommand::Kind::kMget:
        r.op = OpType::kGet;
        r.key = std::move(p.args[1 + p.next]);
        break;
      case PendingCommand::Kind::kExists:
        r.op = OpType::kExists;  // no value is copied
        r.key = std::move(p.args[1 + p.next]);
        break;
      case PendingCommand::Kind::kDel:
        r.op = OpType::kRemove;
        r.key = std::move(p.args[1 + p.next]);
        break;
      case PendingCommand::Kind::kSet:
      case PendingCommand::Kind::kMset:
        r.op = OpType::kPut;
        r.key = std::move(p.args[1 + 2 * p.next]);
        r.value = std::move(p.args[2 + 2 * p.next]);
        break;
    }
    c->result_inline = false;
    // Batch requests always go to the batch workers: a large write run on an accepting
    // loop would hold up every other connection of the loop, interactive ones included.
    // On a batch loop too: running them there (caller-runs, no hand-off to a worker and
    // back) was measured and did not pay, since the batch throughput stayed within the
    // rounds' spread and the co-located interactive p99 doubled (docs/server-history.md,
    // "Batch requests on the batch loop, 2026-11-25"). Interactive
    // requests run on the loop when a permit is free (caller-runs) and wait for a worker
    // otherwise, unless run_on_loop is off. No-control mode has no workers: everything
    // runs on the loop.
    const bool to_workers =
        mw->options().control &&
        (!options.run_on_loop || mw->Classify(r.op, r.value.size(), r.cls) == RequestClass::kBatch);
    if (!to_workers && gather && p.kind == PendingCommand::Kind::kSet) {
      // Made durable with the turn's other SETs at its end (CommitPuts), which resumes
      // the connection.
      io->puts.push_back(std::move(r));
      io->put_conns.push_back(c);
      c->in_group = true;
      c->in_flight = true;
      io->in_flight.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Status s = to_workers ? mw->Submit(std::move(r), CompletionFor(c))
                          : mw->SubmitOrRun(std::move(r), CompletionFor(c));
    if (!s.ok()) {
      c->result_status = s;
      c->result_value.clear();
      Absorb(c);
      continue;
    }
    if (c->result_inline) {
      Absorb(c);
      continue;
    }
    c->in_flight = true;
    io->in_flight.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  FinishPending(c);
}

Completion Server::Impl::CompletionFor(Conn* c) {
  return [c](const Status& st, std::string&& v) {
    c->result_status = st;
    c->result_value = std::move(v);
    if (t_current_io == c->io) {
      c->result_inline = true;  // ran inside SubmitOrRun(Puts), on the loop
    } else {
      Post(c);
    }
  };
}

void Server::Impl::EndTurn(IoThread* io) {
  while (!io->puts.empty()) CommitPuts(io);
}

void Server::Impl::CommitPuts(IoThread* io) {
  if (!io->puts.empty()) {
    // The connections resumed below may add SETs to io->puts: commit this group from
    // buffers of its own.
    std::vector<Request>& reqs = io->committing;
    std::vector<Conn*>& conns = io->committing_conns;
    reqs.swap(io->puts);
    conns.swap(io->put_conns);
    const size_t n = reqs.size();
    std::vector<Completion>& done = io->committing_done;
    std::vector<Status>& accepted = io->committing_accepted;
    done.clear();
    accepted.assign(n, Status::OK());
    for (Conn* c : conns) {
      c->in_group = false;
      c->result_inline = false;
      done.push_back(CompletionFor(c));
    }
    const size_t grouped = mw->SubmitOrRunPuts(reqs.data(), done.data(), n, accepted.data());
    if (grouped > 1) {
      group_commits.fetch_add(1, std::memory_order_relaxed);
      grouped_sets.fetch_add(grouped, std::memory_order_relaxed);
    }
    for (size_t k = 0; k < n; ++k) {
      Conn* c = conns[k];
      if (!accepted[k].ok()) {
        c->result_status = accepted[k];
        c->result_value.clear();
        Resume(io, c);
      } else if (c->result_inline) {
        Resume(io, c);
      } else {
        UpdateInterest(io, c);  // a worker has it and will post the connection back
      }
    }
    reqs.clear();
    conns.clear();
    done.clear();
  }
}

void Server::Impl::Absorb(Conn* c) {
  PendingCommand& p = *c->pending;
  Status& s = c->result_status;
  const size_t i = p.next++;
  if (s.IsInvalidArgument() && p.kind != PendingCommand::Kind::kSet && p.kind != PendingCommand::Kind::kMset) {
    // Only the key can be invalid in a read or a delete (empty, or longer than the
    // engine's max_key_bytes): such a key cannot have been stored, so it does not exist,
    // as Redis answers for a key never set. Writing one is refused.
    s = Status::NotFound();
  }
  if (!s.ok() && !s.IsNotFound()) {
    if (p.error.empty()) {
      p.error = ErrorFor(s);
      p.error_at = i;
    }
    p.next = p.total;  // the command stops at its first error
    c->result_value.clear();
    return;
  }
  switch (p.kind) {
    case PendingCommand::Kind::kGet:
    case PendingCommand::Kind::kMget:
      if (s.ok()) {
        p.held += c->result_value.size();
        p.values[i] = std::move(c->result_value);
        p.found[i] = 1;
      }
      break;
    case PendingCommand::Kind::kDel:
    case PendingCommand::Kind::kExists:
      if (s.ok()) ++p.count;
      break;
    case PendingCommand::Kind::kSet:
    case PendingCommand::Kind::kMset:
      break;
  }
  c->result_value.clear();
}

void Server::Impl::QueueValues(Conn* c, PendingCommand& p, size_t end) {
  if (!p.streaming) {
    Send(c, [&](std::string* out) { resp::AppendArrayHeader(out, p.total); });
    p.streaming = true;
  }
  for (; p.sent < end; ++p.sent) {
    if (p.found[p.sent]) {
      p.held -= p.values[p.sent].size();
      SendValue(c, std::move(p.values[p.sent]));
    } else {
      Send(c, [&](std::string* out) { resp::AppendNull(out, c->resp3); });
    }
  }
}

// What a DEL or MSET that stopped at an error had already done, for its error reply: a
// client otherwise cannot tell that the keys before the failing one were removed or
// written. Empty when the first key failed (nothing was done) and for the other commands,
// which change nothing (reads) or have one key.
static std::string WrittenBefore(const PendingCommand& p) {
  using Kind = PendingCommand::Kind;
  if (p.error_at == 0 || (p.kind != Kind::kDel && p.kind != Kind::kMset)) return "";
  const std::string at = std::to_string(p.error_at + 1) + " of " + std::to_string(p.total);
  if (p.kind == Kind::kMset) {
    const std::string before =
        p.error_at == 1 ? "the pair before it is" : "the " + std::to_string(p.error_at) + " pairs before it are";
    return " (at pair " + at + "; " + before + " written, the rest not)";
  }
  const std::string removed = std::to_string(p.count) + (p.count == 1 ? " key" : " keys");
  return " (at key " + at + "; " + removed + " before it removed, the rest not tried)";
}

void Server::Impl::FinishPending(Conn* c) {
  std::unique_ptr<PendingCommand> p = std::move(c->pending);
  struct Recycle {  // hands the state back to the connection however this returns
    Conn* c;
    std::unique_ptr<PendingCommand>& p;
    ~Recycle() {
      p->Reset();
      c->spare = std::move(p);
    }
  } recycle{c, p};
  CountLookups(*p);
  if (!p->error.empty() && !p->streaming) {
    Send(c, [&](std::string* out) { resp::AppendError(out, p->error + WrittenBefore(*p)); });
    return;
  }
  switch (p->kind) {
    case PendingCommand::Kind::kGet:
      if (p->found[0]) {
        SendValue(c, std::move(p->values[0]));
      } else {
        Send(c, [&](std::string* out) { resp::AppendNull(out, c->resp3); });
      }
      break;
    case PendingCommand::Kind::kMget: {
      // Part of the reply already queued (it reached the output cap): the array's length
      // is sent, so an error answers the failing key and each key after it in place.
      const size_t end = p->error.empty() ? p->total : p->error_at;
      QueueValues(c, *p, end);
      for (size_t i = end; i < p->total; ++i) {
        Send(c, [&](std::string* out) { resp::AppendError(out, p->error); });
      }
      break;
    }
    case PendingCommand::Kind::kDel:
    case PendingCommand::Kind::kExists:
      Send(c, [&](std::string* out) { resp::AppendInteger(out, p->count); });
      break;
    case PendingCommand::Kind::kSet:
    case PendingCommand::Kind::kMset:
      Send(c, [](std::string* out) { resp::AppendSimple(out, "OK"); });
      break;
  }
}

// ---- INFO and NVMW.STATS ----

void Server::Impl::CountLookups(const PendingCommand& p) {
  using Kind = PendingCommand::Kind;
  if (p.kind != Kind::kGet && p.kind != Kind::kMget && p.kind != Kind::kExists) return;
  // As Redis counts its lookups: the keys before a failing one were looked up, the rest not.
  const size_t looked_up = p.error.empty() ? p.total : p.error_at;
  uint64_t hits = 0;
  if (p.kind == Kind::kExists) {
    hits = static_cast<uint64_t>(p.count);
  } else {
    for (size_t i = 0; i < looked_up; ++i) hits += p.found[i];
  }
  if (hits > 0) keyspace_hits.fetch_add(hits, std::memory_order_relaxed);
  if (looked_up > hits) keyspace_misses.fetch_add(looked_up - hits, std::memory_order_relaxed);
}

uint64_t Server::Impl::InstantaneousOpsPerSec() {
  constexpr int64_t kSpanNs = 1000000000LL;      // the rate covers at least this
  constexpr int64_t kSampleGapNs = 100000000LL;  // samples kept at most this often
  const int64_t now = NowNs();
  const uint64_t done = commands.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(ops_samples_mu);
  // Keep one sample at least kSpanNs old (the reference) and the newer ones.
  while (ops_samples.size() >= 2 && now - ops_samples[1].first >= kSpanNs) ops_samples.pop_front();
  const auto [since_ns, since_done] =
      ops_samples.empty() ? std::pair<int64_t, uint64_t>(start_ns, 0) : ops_samples.front();
  if (ops_samples.empty() || now - ops_samples.back().first >= kSampleGapNs) ops_samples.emplace_back(now, done);
  if (now <= since_ns || done < since_done) return 0;
  return static_cast<uint64_t>(std::llround(static_cast<double>(done - since_done) * 1e9 /
                                            static_cast<double>(now - since_ns)));
}

std::string Server::Impl::Info(const std::vector<std::string>& args) {
  bool all = args.size() < 2;
  std::vector<std::string> sections;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string s = Lower(args[i]);
    if (s == "all" || s == "everything" || s == "default") all = true;
    sections.push_back(std::move(s));
  }
  auto want = [&](const char* name) {
    return all || std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  const int64_t uptime_s = (NowNs() - start_ns) / 1000000000LL;
  std::string out;
  auto line = [&](std::string_view k, const std::string& v) {
    out.append(k);
    out.push_back(':');
    out.append(v);
    out.append("\r\n");
  };
  auto section = [&](const char* title) {
    if (!out.empty()) out.append("\r\n");
    out.append("# ");
    out.append(title);
    out.append("\r\n");
  };
  if (want("server")) {
    section("Server");
    line("redis_version", kRedisVersion);
    line("nvmw_version", kNvmwVersion);
    line("redis_mode", "standalone");
    line("os", "Linux");
    line("arch_bits", std::to_string(sizeof(void*) * 8));
    line("multiplexing_api", "epoll");
    line("process_id", std::to_string(::getpid()));
    line("run_id", RunId(start_ns));
    line("tcp_port", std::to_string(port.load()));
    line("uptime_in_seconds", std::to_string(uptime_s));
    line("uptime_in_days", std::to_string(uptime_s / 86400));
    line("executable", Executable());
    line("config_file", "");  // configured by its command line only
    // As Redis: 1 when replies are written by several threads.
    line("io_threads_active", options.io_threads > 1 ? "1" : "0");
    line("engine", engine->Name());
  }
  if (want("clients")) {
    section("Clients");
    line("connected_clients", std::to_string(connections_current.load()));
    line("maxclients", std::to_string(options.max_clients));
    line("blocked_clients", "0");
  }
  if (want("memory")) {
    // The process's resident memory (Redis reports its allocator's bytes here; nvmw has
    // no allocator accounting, and the pmem pool is mapped, not counted).
    long pages = 0, resident = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    const uint64_t rss = static_cast<uint64_t>(resident) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    char human[32];
    std::snprintf(human, sizeof human, "%.2fM", static_cast<double>(rss) / (1024.0 * 1024.0));
    section("Memory");
    line("used_memory", std::to_string(rss));
    line("used_memory_human", human);
    line("used_memory_rss", std::to_string(rss));
    line("used_memory_rss_human", human);
    line("maxmemory", "0");
    line("maxmemory_human", "0B");
    line("maxmemory_policy", "noeviction");
  }
  if (want("persistence")) {
    // Only what readiness checks look for: the store is open before the server listens.
    section("Persistence");
    line("loading", "0");
  }
  if (want("stats")) {
    section("Stats");
    line("total_connections_received", std::to_string(connections_total.load()));
    line("total_commands_processed", std::to_string(commands.load()));
    line("instantaneous_ops_per_sec", std::to_string(InstantaneousOpsPerSec()));
    line("rejected_connections", std::to_string(rejected_connections.load()));
    line("expired_keys", "0");  // no expiry
    line("evicted_keys", "0");  // a full store refuses writes, evicts nothing
    line("keyspace_hits", std::to_string(keyspace_hits.load()));
    line("keyspace_misses", std::to_string(keyspace_misses.load()));
    line("nvmw_protocol_errors", std::to_string(protocol_errors.load()));
    line("nvmw_auth_failures", std::to_string(auth_failures.load()));
    line("nvmw_output_buffer_closes", std::to_string(output_buffer_closes.load()));
    line("nvmw_output_peak_bytes", std::to_string(output_peak_bytes.load()));
  }
  if (want("replication")) {
    // A standalone store, as HELLO's role says; health checks (a proxy's "role:master"
    // test) look for this line.
    section("Replication");
    line("role", "master");
    line("connected_slaves", "0");
  }
  if (want("keyspace")) {
    // As Redis: a database's line only when it holds a key.
    section("Keyspace");
    const uint64_t keys = engine->Count();
    if (keys > 0) line("db0", "keys=" + std::to_string(keys) + ",expires=0,avg_ttl=0");
  }
  return out;
}

std::string Server::Impl::StatsJson() {
  const WindowStats w = mw->GetStats();
  const State st = mw->GetState();
  int ti = 0, tb = 0;
  mw->GetThreads(&ti, &tb);
  const MiddlewareOptions& mo = mw->options();
  std::string out = "{\"window\":{\"seq\":" + std::to_string(w.seq) + ",\"start_s\":";
  AppendJsonNumber(&out, w.start_s);
  out += ",\"duration_s\":";
  AppendJsonNumber(&out, w.duration_s);
  out += ",\"interactive\":";
  AppendClassJson(&out, w.interactive);
  out += ",\"batch\":";
  AppendClassJson(&out, w.batch);
  out += ",\"all\":";
  AppendClassJson(&out, w.all);
  out += "},\"state\":{";
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (i) out.push_back(',');
    out += "\"";
    out.append(kStateNames[i]);
    out += "\":";
    AppendJsonNumber(&out, st[i]);
  }
  out += "},\"threads\":{\"interactive\":" + std::to_string(ti) + ",\"batch\":" + std::to_string(tb) +
         "},\"queue\":{\"interactive\":" + std::to_string(mw->QueueLength(RequestClass::kInteractive)) +
         ",\"batch\":" + std::to_string(mw->QueueLength(RequestClass::kBatch)) + "}";
  out += ",\"limits\":{\"control\":" + std::string(mo.control ? "true" : "false") +
         ",\"execution\":\"" + (mo.execution == Execution::kHandOff ? "handoff" : "caller-runs") +
         "\",\"max_threads\":" + std::to_string(mo.max_threads) +
         ",\"no_control_max_inflight\":" + std::to_string(mo.no_control_max_inflight) +
         ",\"batch_threshold_bytes\":" + std::to_string(mo.batch_threshold_bytes) +
         ",\"queue_capacity\":" + std::to_string(mo.queue_capacity) +
         ",\"max_value_bytes\":" + std::to_string(mo.max_value_bytes) + ",\"window_s\":";
  AppendJsonNumber(&out, mo.window_s);
  out += "},\"server\":{\"connections_current\":" + std::to_string(connections_current.load()) +
         ",\"connections_total\":" + std::to_string(connections_total.load()) +
         ",\"rejected_connections\":" + std::to_string(rejected_connections.load()) +
         ",\"commands\":" + std::to_string(commands.load()) +
         ",\"protocol_errors\":" + std::to_string(protocol_errors.load()) +
         ",\"auth_failures\":" + std::to_string(auth_failures.load()) +
         ",\"output_buffer_closes\":" + std::to_string(output_buffer_closes.load()) +
         ",\"output_peak_bytes\":" + std::to_string(output_peak_bytes.load()) +
         ",\"batch_moves\":" + std::to_string(batch_moves.load()) +
         ",\"group_commits\":" + std::to_string(group_commits.load()) +
         ",\"grouped_sets\":" + std::to_string(grouped_sets.load()) +
         ",\"polled_turns\":" + std::to_string(polled_turns.load()) + "}}";
  return out;
}

// ---- dispatch ----

void Server::Impl::Execute(IoThread* io, Conn* c, std::vector<std::string>& args) {
  auto error = [&](std::string_view msg) {
    Send(c, [&](std::string* out) { resp::AppendError(out, msg); });
  };
  auto ok = [&] { Send(c, [](std::string* out) { resp::AppendSimple(out, "OK"); }); };
  const CommandSpec* spec = Find(args[0]);
  if (spec == nullptr) {
    error(UnknownCommandError(args));
    return;
  }
  const int argc = static_cast<int>(std::min<size_t>(args.size(), 1 << 30));
  if ((spec->arity > 0 && argc != spec->arity) || (spec->arity < 0 && argc < -spec->arity)) {
    error("ERR wrong number of arguments for '" + std::string(spec->name) + "' command");
    return;
  }
  if (!c->authed && spec->cmd != Cmd::kAuth && spec->cmd != Cmd::kHello && spec->cmd != Cmd::kQuit) {
    error("NOAUTH Authentication required.");
    return;
  }
  auto check_password = [&](std::string_view user, std::string_view pass) {
    if (user == "default" && (options.password.empty() || pass == options.password)) {
      c->authed = true;
      return true;
    }
    auth_failures.fetch_add(1, std::memory_order_relaxed);
    error("WRONGPASS invalid username-password pair or user is disabled.");
    return false;
  };
  auto start_pending = [&](PendingCommand::Kind kind, size_t total) {
    std::unique_ptr<PendingCommand> p = c->spare ? std::move(c->spare) : std::make_unique<PendingCommand>();
    p->kind = kind;
    p->total = total;
    if (kind == PendingCommand::Kind::kGet || kind == PendingCommand::Kind::kMget) {
      p->values.resize(total);
      p->found.assign(total, 0);
    }
    // Swapped, not moved: the parser gets the previous command's (cleared) vector back,
    // with its capacity.
    p->args.swap(args);
    c->pending = std::move(p);
    Continue(io, c);
  };

  switch (spec->cmd) {
    case Cmd::kGet:
      start_pending(PendingCommand::Kind::kGet, 1);
      return;
    case Cmd::kSet:
      if (args.size() > 3) {
        // Expiry and conditional sets need what the engine does not have; say so rather
        // than store the value without them. The option is read up to a NUL byte, as Redis
        // reads it (a C string): `nx\0x` is NX there.
        const std::string name = CPrefix(args[3], args[3].size());
        std::string opt = Lower(name);
        static constexpr std::string_view kKnown[] = {"ex", "px", "exat", "pxat", "nx", "xx", "keepttl", "get"};
        if (std::find(std::begin(kKnown), std::end(kKnown), opt) != std::end(kKnown)) {
          std::string up = name;
          for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
          error("ERR SET option " + up + " is not supported by nvmw (no expiry, no conditional set)");
        } else {
          error("ERR syntax error");
        }
        return;
      }
      start_pending(PendingCommand::Kind::kSet, 1);
      return;
    case Cmd::kDel:
      start_pending(PendingCommand::Kind::kDel, args.size() - 1);
      return;
    case Cmd::kExists:
      start_pending(PendingCommand::Kind::kExists, args.size() - 1);
      return;
    case Cmd::kMget:
      start_pending(PendingCommand::Kind::kMget, args.size() - 1);
      return;
    case Cmd::kMset: {
      if ((args.size() - 1) % 2 != 0) {
        error("ERR wrong number of arguments for 'mset' command");
        return;
      }
      // Refuse the arguments the store would refuse before writing any pair, so a bad
      // pair never leaves the ones before it written. Errors found while writing (a
      // full pool, a full queue, a key longer than the engine's max_key_bytes) still
      // stop at their pair.
      const uint64_t max_value = mw->options().max_value_bytes;
      for (size_t i = 1; i < args.size(); i += 2) {
        if (args[i].empty()) {
          error(ErrorFor(Status::InvalidArgument("empty key")));
          return;
        }
        if (args[i + 1].size() > max_value) {
          error(ErrorFor(Status::InvalidArgument("value of " + std::to_string(args[i + 1].size()) +
                                                 " bytes exceeds max_value_bytes " +
                                                 std::to_string(max_value))));
          return;
        }
      }
      start_pending(PendingCommand::Kind::kMset, (args.size() - 1) / 2);
      return;
    }
    case Cmd::kPing:
      if (args.size() > 2) {
        error("ERR wrong number of arguments for 'ping' command");
      } else if (args.size() == 2) {
        Send(c, [&](std::string* out) { resp::AppendBulk(out, args[1]); });
      } else {
        Send(c, [](std::string* out) { resp::AppendSimple(out, "PONG"); });
      }
      return;
    case Cmd::kEcho:
      Send(c, [&](std::string* out) { resp::AppendBulk(out, args[1]); });
      return;
    case Cmd::kInfo: {
      std::string info = Info(args);
      Send(c, [&](std::string* out) { resp::AppendBulk(out, info); });
      return;
    }
    case Cmd::kDbsize:
      Send(c, [&](std::string* out) { resp::AppendInteger(out, static_cast<int64_t>(engine->Count())); });
      return;
    case Cmd::kSelect: {
      int64_t db = -1;
      if (!ParseRedisInt(args[1], &db)) {
        error("ERR value is not an integer or out of range");
      } else if (db < INT32_MIN || db > INT32_MAX) {  // Redis reads the index as an int
        error("ERR value is out of range, value must between -2147483648 and 2147483647");
      } else if (db != 0) {
        error("ERR DB index is out of range");
      } else {
        ok();
      }
      return;
    }
    case Cmd::kQuit:
      ok();
      c->close_after_write = true;
      return;
    case Cmd::kAuth:
      if (args.size() > 3) {
        error("ERR syntax error");
      } else if (args.size() == 2 && options.password.empty()) {
        error("ERR AUTH <password> called without any password configured for the default "
              "user. Are you sure your configuration is correct?");
      } else if (check_password(args.size() == 3 ? args[1] : "default", args.back())) {
        ok();
      }
      return;
    case Cmd::kHello: {
      int proto_asked = 0;  // 0: keep the connection's protocol
      if (args.size() >= 2) {
        int64_t proto = 0;
        if (!ParseRedisInt(args[1], &proto)) {
          error("ERR Protocol version is not an integer or out of range");
          return;
        }
        if (proto != 2 && proto != 3) {
          error("NOPROTO sorry, this protocol version is not supported");
          return;
        }
        proto_asked = static_cast<int>(proto);
      }
      std::string setname;
      bool has_setname = false;
      for (size_t i = 2; i < args.size(); ++i) {
        const std::string opt = Lower(args[i]);
        if (opt == "auth" && i + 2 < args.size()) {
          if (!check_password(args[i + 1], args[i + 2])) return;
          i += 2;
        } else if (opt == "setname" && i + 1 < args.size()) {
          setname = args[i + 1];
          has_setname = true;
          i += 1;
        } else {
          error("ERR Syntax error in HELLO option '" + args[i].substr(0, 128) + "'");
          return;
        }
      }
      if (!c->authed) {
        error("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
              "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
              "select the RESP protocol version at the same time");
        return;
      }
      if (has_setname) {
        if (!ValidClientName(setname)) {
          error("ERR Client names cannot contain spaces, newlines or special characters.");
          return;
        }
        c->name = setname;
      }
      if (proto_asked != 0) c->resp3 = proto_asked == 3;
      Send(c, [&](std::string* out) {
        resp::AppendMapHeader(out, 7, c->resp3);
        resp::AppendBulk(out, "server");
        resp::AppendBulk(out, "redis");
        resp::AppendBulk(out, "version");
        resp::AppendBulk(out, kRedisVersion);
        resp::AppendBulk(out, "proto");
        resp::AppendInteger(out, c->resp3 ? 3 : 2);
        resp::AppendBulk(out, "id");
        resp::AppendInteger(out, static_cast<int64_t>(c->id));
        resp::AppendBulk(out, "mode");
        resp::AppendBulk(out, "standalone");
        resp::AppendBulk(out, "role");
        resp::AppendBulk(out, "master");
        resp::AppendBulk(out, "modules");
        resp::AppendArrayHeader(out, 0);
      });
      return;
    }
    case Cmd::kClient: {
      // The subcommands nvmw has and their arities as Redis's (SETINFO as Redis 7.2's); the
      // others are unknown subcommands.
      static constexpr std::pair<std::string_view, int> kSubcommands[] = {
          {"getname", 2}, {"help", 2}, {"id", 2}, {"setinfo", 4}, {"setname", 3},
      };
      if (const std::string refusal = SubcommandError(args, "CLIENT", kSubcommands); !refusal.empty()) {
        error(refusal);
        return;
      }
      const std::string sub = Lower(args[1]);
      if (sub == "setname") {
        if (!ValidClientName(args[2])) {
          error("ERR Client names cannot contain spaces, newlines or special characters.");
        } else {
          c->name = args[2];
          ok();
        }
      } else if (sub == "getname") {
        if (c->name.empty()) {
          Send(c, [&](std::string* out) { resp::AppendNull(out, c->resp3); });
        } else {
          Send(c, [&](std::string* out) { resp::AppendBulk(out, c->name); });
        }
      } else if (sub == "id") {
        Send(c, [&](std::string* out) { resp::AppendInteger(out, static_cast<int64_t>(c->id)); });
      } else if (sub == "help") {
        // Redis's lines for the subcommands nvmw has (SETINFO's as Redis 7.2's).
        static constexpr std::string_view kHelp[] = {
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are:",
            "    * LIB-NAME: the client lib name.",
            "    * LIB-VER: the client lib version.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Prints this help.",
        };
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, std::size(kHelp));
          for (std::string_view line : kHelp) resp::AppendSimple(out, line);
        });
      } else {  // setinfo
        // As Redis 7.2: the value takes the characters a client name takes, since CLIENT
        // LIST prints it between spaces. Checked, then not kept (nvmw has no CLIENT LIST).
        const std::string attr = Lower(args[2]);
        if (attr != "lib-name" && attr != "lib-ver") {
          error("ERR Unrecognized option '" + args[2].substr(0, 128) + "'");
        } else if (!ValidClientName(args[3])) {
          error("ERR " + args[2] + " cannot contain spaces, newlines or special characters.");
        } else {
          ok();
        }
      }
      return;
    }
    case Cmd::kCommand: {
      if (args.size() == 1) {
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, std::size(kCommands));
          for (const CommandSpec& spec_i : kCommands) AppendCommandEntry(out, spec_i, c->resp3);
        });
        return;
      }
      // The subcommands and their arities as Redis 7.0's (command|count and so on).
      static constexpr std::pair<std::string_view, int> kSubcommands[] = {
          {"count", 2}, {"docs", -2}, {"getkeys", -4}, {"getkeysandflags", -4}, {"help", 2}, {"info", -2},
          {"list", -2},
      };
      if (const std::string refusal = SubcommandError(args, "COMMAND", kSubcommands); !refusal.empty()) {
        error(refusal);
        return;
      }
      const std::string sub = Lower(args[1]);
      if (sub == "count") {
        Send(c, [](std::string* out) { resp::AppendInteger(out, static_cast<int64_t>(std::size(kCommands))); });
      } else if (sub == "docs") {
        // As Redis: no names, every command; else those of the names that are commands, in
        // the order asked (an unknown name is left out, a name asked twice answered twice).
        std::vector<const CommandDoc*> docs;
        if (args.size() == 2) {
          for (const CommandDoc& d : kCommandDocs) docs.push_back(&d);
        }
        for (size_t i = 2; i < args.size(); ++i) {
          const CommandSpec* s = Find(args[i]);
          if (s != nullptr) docs.push_back(&kCommandDocs[s - kCommands]);
        }
        Send(c, [&](std::string* out) {
          resp::AppendMapHeader(out, docs.size(), c->resp3);
          for (const CommandDoc* d : docs) AppendCommandDoc(out, *d, c->resp3);
        });
      } else if (sub == "info" && args.size() == 2) {  // no names: every command, as COMMAND
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, std::size(kCommands));
          for (const CommandSpec& spec_i : kCommands) AppendCommandEntry(out, spec_i, c->resp3);
        });
      } else if (sub == "info") {
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, args.size() - 2);
          for (size_t i = 2; i < args.size(); ++i) {
            const CommandSpec* s = Find(args[i]);
            if (s != nullptr) {
              AppendCommandEntry(out, *s, c->resp3);
            } else {
              resp::AppendNull(out, c->resp3);
            }
          }
        });
      } else if (sub == "list") {
        // COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern], one
        // filter at most, as Redis 7.0 parses it. No command belongs to a module.
        enum class Filter { kNone, kModule, kAclCat, kPattern } filter = Filter::kNone;
        std::string_view filter_arg;
        for (size_t i = 2; i < args.size(); i += 3) {
          const std::string type = i + 1 < args.size() ? Lower(args[i + 1]) : std::string();
          if (Lower(args[i]) != "filterby" || args.size() - 1 - i != 2) {
            error("ERR syntax error");
            return;
          }
          if (type == "module") {
            filter = Filter::kModule;
          } else if (type == "aclcat") {
            filter = Filter::kAclCat;
          } else if (type == "pattern") {
            filter = Filter::kPattern;
          } else {
            error("ERR syntax error");
            return;
          }
          filter_arg = args[i + 2];
        }
        std::vector<std::string_view> names;
        for (const CommandSpec& s : kCommands) {
          bool keep = true;
          if (filter == Filter::kModule) {
            keep = false;
          } else if (filter == Filter::kAclCat) {  // the category without its '@', any case
            keep = std::any_of(s.categories.begin(), s.categories.end(), [&](std::string_view cat) {
              return !cat.empty() && EqualsNoCase(cat.substr(1), filter_arg);
            });
          } else if (filter == Filter::kPattern) {
            keep = GlobMatch(filter_arg, s.name, true);
          }
          if (keep) names.push_back(s.name);
        }
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, names.size());
          for (std::string_view n : names) resp::AppendBulk(out, n);
        });
      } else if (sub == "getkeys" || sub == "getkeysandflags") {
        // The keys of a full command, from the table's key positions (and what it does to
        // them); the errors Redis gives, in its order.
        std::vector<std::string>::const_iterator first = args.begin() + 2;
        const CommandSpec* s = Find(*first);
        const int n = argc - 2;
        if (s == nullptr) {
          error("ERR Invalid command specified");
        } else if (s->first_key == 0) {
          error("ERR The command has no key arguments");
        } else if ((s->arity > 0 && n != s->arity) || (s->arity < 0 && n < -s->arity)) {
          error("ERR Invalid number of arguments specified for command");
        } else {
          const int last = s->last_key < 0 ? n + s->last_key : s->last_key;
          std::array<std::string_view, 3> key_flags{s->key_flags[0], s->key_flags[1], ""};
          if (s->cmd == Cmd::kSet) {
            // As Redis: SET with a GET option reads the key too (a word "get" as C reads it).
            for (int i = 3; i < n; ++i) {
              if (EqualsNoCase("get", std::string_view(first[i].c_str()))) key_flags = {"RW", "access", "update"};
            }
          }
          Send(c, [&](std::string* out) {
            resp::AppendArrayHeader(out, (last - s->first_key) / s->step + 1);
            for (int i = s->first_key; i <= last; i += s->step) {
              if (sub == "getkeys") {
                resp::AppendBulk(out, first[i]);
                continue;
              }
              resp::AppendArrayHeader(out, 2);
              resp::AppendBulk(out, first[i]);
              size_t nflags = 0;
              for (std::string_view f : key_flags) nflags += f.empty() ? 0 : 1;
              resp::AppendSetHeader(out, nflags, c->resp3);
              for (std::string_view f : key_flags) {
                if (!f.empty()) resp::AppendSimple(out, f);
              }
            }
          });
        }
      } else {  // help
        static constexpr std::string_view kHelp[] = {
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
            "HELP",
            "    Prints this help.",
        };
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, std::size(kHelp));
          for (std::string_view line : kHelp) resp::AppendSimple(out, line);
        });
      }
      return;
    }
    case Cmd::kConfig: {
      // The subcommands and their arities as Redis 7.0's; SET, RESETSTAT and REWRITE are
      // refused (the configuration is the command line's, the counters only grow).
      static constexpr std::pair<std::string_view, int> kSubcommands[] = {
          {"get", -3}, {"help", 2}, {"resetstat", 2}, {"rewrite", 2}, {"set", -4},
      };
      if (const std::string refusal = SubcommandError(args, "CONFIG", kSubcommands); !refusal.empty()) {
        error(refusal);
        return;
      }
      const std::string sub = Lower(args[1]);
      if (sub == "help") {
        static constexpr std::string_view kHelp[] = {
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "HELP",
            "    Prints this help.",
        };
        Send(c, [&](std::string* out) {
          resp::AppendArrayHeader(out, std::size(kHelp));
          for (std::string_view line : kHelp) resp::AppendSimple(out, line);
        });
        return;
      }
      if (sub != "get") {
        error("ERR CONFIG " + args[1].substr(0, 32) + " is not supported by nvmw (CONFIG GET only)");
        return;
      }
      const std::pair<std::string, std::string> params[] = {
          {"save", ""},
          {"appendonly", "no"},
          {"databases", "1"},
          {"maxclients", std::to_string(options.max_clients)},
          {"port", std::to_string(port.load())},
          {"bind", options.bind},
          {"protected-mode", options.protected_mode ? "yes" : "no"},
          {"proto-max-bulk-len", std::to_string(options.max_bulk_bytes)},
          {"maxmemory", "0"},
          {"maxmemory-policy", "noeviction"},  // a full store refuses writes (-OOM), evicts nothing
          {"timeout", "0"},
          {"io-threads", std::to_string(options.io_threads)},
      };
      // As Redis 7.0 (configGetCommand), pattern by pattern: one without `[*?` before its
      // first NUL byte is a name, looked up whole in any case and answered under the name
      // asked; any other is matched by Redis's glob, in any case, up to its first NUL
      // byte. A parameter is answered once, under the first name or pattern that found it.
      std::vector<std::pair<std::string_view, const std::string*>> hits;  // name answered, value
      auto answered = [&](std::string_view name) {
        return std::any_of(hits.begin(), hits.end(), [&](const auto& h) {
          return h.first.size() == name.size() && EqualsNoCase(Lower(h.first), name);
        });
      };
      for (size_t i = 2; i < args.size(); ++i) {
        const std::string& pattern = args[i];
        const std::string_view c_pattern(pattern.c_str());  // up to the first NUL, as C reads it
        if (c_pattern.find_first_of("[*?") == std::string_view::npos) {
          if (answered(pattern)) continue;
          for (const auto& p : params) {
            if (EqualsNoCase(p.first, pattern)) hits.emplace_back(pattern, &p.second);
          }
          continue;
        }
        for (const auto& p : params) {
          if (!answered(p.first) && GlobMatch(c_pattern, p.first, true)) hits.emplace_back(p.first, &p.second);
        }
      }
      Send(c, [&](std::string* out) {
        resp::AppendMapHeader(out, hits.size(), c->resp3);
        for (const auto& [name, value] : hits) {
          resp::AppendBulk(out, name);
          resp::AppendBulk(out, *value);
        }
      });
      return;
    }
    case Cmd::kTime: {
      timespec ts{};
      ::clock_gettime(CLOCK_REALTIME, &ts);
      Send(c, [&](std::string* out) {
        resp::AppendArrayHeader(out, 2);
        resp::AppendBulk(out, std::to_string(ts.tv_sec));
        resp::AppendBulk(out, std::to_string(ts.tv_nsec / 1000));
      });
      return;
    }
    case Cmd::kNvmwClass: {
      if (args.size() == 1) {
        Send(c, [&](std::string* out) { resp::AppendBulk(out, ClassName(c->cls)); });
        return;
      }
      if (args.size() > 2) {
        error("ERR wrong number of arguments for 'nvmw.class' command");
        return;
      }
      const std::string v = Lower(args[1]);
      if (v == "interactive") {
        c->cls = RequestClass::kInteractive;
        RequestMove(io, c, false);  // off a batch loop, if it is on one
      } else if (v == "batch") {
        c->cls = RequestClass::kBatch;
        RequestMove(io, c, true);  // onto a batch loop, if there are any
      } else if (v == "auto") {
        c->cls = RequestClass::kAuto;
      } else {
        error("ERR request class must be interactive, batch or auto");
        return;
      }
      ok();
      return;
    }
    case Cmd::kNvmwStats: {
      std::string json = StatsJson();
      Send(c, [&](std::string* out) { resp::AppendBulk(out, json); });
      return;
    }
  }
}

}  // namespace nvmw
