// The Redis-protocol server end to end over loopback, with a tiny raw-socket client:
// the commands, pipelining with replies in order, a request run by a worker while the
// loop serves others, large values, protocol errors and the caps, AUTH, protected mode
// (a client connecting to this host's own address on another interface), the client
// cap, a slow reader that blocks nobody and is closed once stalled, an MGET that pauses
// at the output cap, the graceful Stop that finishes a command in flight, and the group
// commit of the SETs one turn of the loop reads.
#include "nvmw/server.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_test_util.h"
#include "middleware/test_engine.h"
#include "nvmw/middleware.h"
#include "test_util.h"

namespace nvmw {
namespace {

using testing::TestEngine;

bool WaitUntil(const std::function<bool()>& pred) {
  return testing::WaitUntil(pred, std::chrono::milliseconds(1));
}

std::string Multibulk(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

std::string Bulk(const std::string& v) { return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n"; }

// A blocking client (of loopback unless told another IPv4 address) that reads whole
// RESP2/RESP3 replies (raw text), with a timeout.
class Client {
 public:
  // rcvbuf > 0: the socket's receive buffer, fixed before connecting (not autotuned).
  explicit Client(int port, bool nodelay = true, in_addr_t host = htonl(INADDR_LOOPBACK), int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = host;
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    if (nodelay) ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  // Bytes the kernel holds for this client, not read yet.
  size_t Unread() const {
    int n = 0;
    return ::ioctl(fd_, FIONREAD, &n) == 0 ? static_cast<size_t>(n) : 0;
  }

  bool Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t w = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (w <= 0) return false;
      off += static_cast<size_t>(w);
    }
    return true;
  }
  std::string Cmd(const std::vector<std::string>& args) {
    Send(Multibulk(args));
    return Reply();
  }
  // One complete reply, or "" on EOF, error or timeout.
  std::string Reply(int timeout_ms = 20000) {
    std::string out;
    return ReadValue(&out, timeout_ms) ? out : std::string();
  }
  // True when the server closed the connection (EOF or reset) within the timeout, with
  // no reply bytes left unread.
  bool ClosedByServer(int timeout_ms = 20000) {
    if (pos_ < buf_.size()) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[1];
    const ssize_t r = ::recv(fd_, tmp, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }

 private:
  // Reads more into buf_; returns bytes read (0 on EOF/timeout/error).
  size_t Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return 0;
    char tmp[65536];
    const ssize_t r = ::recv(fd_, tmp, sizeof tmp, 0);
    if (r <= 0) return 0;
    buf_.append(tmp, static_cast<size_t>(r));
    return static_cast<size_t>(r);
  }
  bool Need(size_t n, int timeout_ms) {
    while (buf_.size() - pos_ < n) {
      if (Fill(timeout_ms) == 0) return false;
    }
    return true;
  }
  bool ReadLine(std::string* line, int timeout_ms) {
    for (;;) {
      const size_t nl = buf_.find("\r\n", pos_);
      if (nl != std::string::npos) {
        *line = buf_.substr(pos_, nl + 2 - pos_);
        pos_ = nl + 2;
        Compact();
        return true;
      }
      if (Fill(timeout_ms) == 0) return false;
    }
  }
  void Compact() {
    if (pos_ > (1 << 20)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }
  bool ReadValue(std::string* out, int timeout_ms) {
    std::string line;
    if (!ReadLine(&line, timeout_ms)) return false;
    out->append(line);
    const bool sized = line[0] == '$' || line[0] == '*' || line[0] == '%' || line[0] == '~';
    const long n = sized ? std::stol(line.substr(1)) : 0;
    if (line[0] == '$' && n >= 0) {
      if (!Need(static_cast<size_t>(n) + 2, timeout_ms)) return false;
      out->append(buf_, pos_, static_cast<size_t>(n) + 2);
      pos_ += static_cast<size_t>(n) + 2;
      Compact();
    } else if (line[0] == '*' || line[0] == '%' || line[0] == '~') {
      for (long i = 0; i < (line[0] == '%' ? 2 * n : n); ++i) {
        if (!ReadValue(out, timeout_ms)) return false;
      }
    }
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
  size_t pos_ = 0;
};

// The options the tests start from: the defaults, but the batch loops at normal priority.
// Under SCHED_IDLE (the default) a batch loop gets a core only when nothing else wants
// one, and on a loaded test machine a connection moved there (a large value) could wait
// longer than the client's 20 s for its reply. The tests of the idle setting set it.
ServerOptions TestServerOptions() {
  ServerOptions o;
  o.batch_io_idle = false;
  return o;
}

class ServerTest : public ::testing::Test {
 protected:
  void StartAll(ServerOptions o = TestServerOptions(), MiddlewareOptions mo = MiddlewareOptions()) {
    StartOn(&engine_, o, mo);
  }
  // The same on another engine (one that outlives the server, e.g. memory_).
  void StartOn(Engine* engine, ServerOptions o = TestServerOptions(), MiddlewareOptions mo = MiddlewareOptions()) {
    mo.window_s = 60;
    mo.max_threads = 4;
    mw_ = std::make_unique<Middleware>(mo);
    ASSERT_TRUE(mw_->Start(engine, 1, 1).ok());
    o.port = 0;
    server_ = std::make_unique<Server>();
    ASSERT_TRUE(server_->Start(mw_.get(), engine, o).ok());
    ASSERT_GT(server_->port(), 0);
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->Stop().ok());
    }
    if (mw_) {
      EXPECT_TRUE(mw_->Stop().ok());
    }
  }
  int port() const { return server_->port(); }
  // SET and GET of three keys on three connections, 20 times, each reply checked.
  void ServeTwentyRounds();

  TestEngine engine_;
  // A real engine, for what the test engine does not check (key sizes).
  std::unique_ptr<Engine> memory_ = NewMemoryEngine();
  std::unique_ptr<Middleware> mw_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, StartRefusesBadOptionsAndATakenPort) {
  StartAll();
  Server other;
  ServerOptions o = TestServerOptions();
  o.port = port();
  EXPECT_TRUE(other.Start(mw_.get(), &engine_, o).IsIOError());
  o.port = 70000;
  EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument());
  o.port = 0;
  o.bind = "not-an-address";
  EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument());
  o.bind = "127.0.0.1";
  o.io_threads = 0;
  EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument());
  o.io_threads = 1;
  for (const int64_t bad : {int64_t{-1}, int64_t{1000000001}}) {
    o.poll_ns = bad;
    EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument()) << bad;
  }
}

// A loop that polls (up to the longest poll_ns, 1 s, after every turn with work) serves
// several connections and pipelines as one that sleeps, and stops without waiting for
// its poll to end. One that sleeps (poll_ns 0, the default) counts no polled turn.
TEST_F(ServerTest, PollingLoopServesAndStops) {
  for (const int64_t poll_ns : {int64_t{0}, int64_t{1000000000}}) {
    SCOPED_TRACE(poll_ns);
    ServerOptions o = TestServerOptions();
    o.poll_ns = poll_ns;
    StartAll(o);
    ServeTwentyRounds();
    if (poll_ns == 0) {
      EXPECT_EQ(server_->Stats().polled_turns, 0u);
    }
    EXPECT_TRUE(server_->Stop().ok());
    server_.reset();
    EXPECT_TRUE(mw_->Stop().ok());
    mw_.reset();
  }
}

void ServerTest::ServeTwentyRounds() {
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < 3; ++i) c.push_back(std::make_unique<Client>(port()));
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 3; ++i) {
      const std::string key = "k" + std::to_string(i);
      ASSERT_TRUE(c[i]->Send(Multibulk({"SET", key, std::to_string(round)}) + Multibulk({"GET", key})));
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(c[i]->Reply(), "+OK\r\n");
      EXPECT_EQ(c[i]->Reply(), Bulk(std::to_string(round)));
    }
  }
}

TEST_F(ServerTest, KeyCommands) {
  StartAll();
  Client c(port());
  ASSERT_TRUE(c.connected());
  EXPECT_EQ(c.Cmd({"SET", "k", "v1"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"GET", "k"}), "$2\r\nv1\r\n");
  EXPECT_EQ(c.Cmd({"get", "missing"}), "$-1\r\n");
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", "b", "2"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "nope", "b"}), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "a", "b", "nope", "a"}), ":3\r\n");
  EXPECT_EQ(c.Cmd({"DBSIZE"}), ":3\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "a", "nope", "b"}), ":2\r\n");
  EXPECT_EQ(c.Cmd({"DBSIZE"}), ":1\r\n");
  EXPECT_EQ(engine_.Count(), 1u);  // what the engine holds, not a server-side copy
  EXPECT_EQ(c.Cmd({"SET", "k", "v", "EX", "10"}),
            "-ERR SET option EX is not supported by nvmw (no expiry, no conditional set)\r\n");
  EXPECT_EQ(c.Cmd({"SET", "k", "v", "NX"}).rfind("-ERR SET option NX is not supported", 0), 0u);
  EXPECT_EQ(c.Cmd({"SET", "k", "v", "BOGUS"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.Cmd({"GET", "k"}), "$2\r\nv1\r\n");  // refused SETs stored nothing
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", "b"}), "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(c.Cmd({"GET"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(c.Cmd({"SET", "", "v"}).rfind("-ERR invalid argument", 0), 0u);  // the engine refuses empty keys
}

// EXISTS asks the engine whether each key exists and reads no value, however large; each
// key is one interactive request of 0 bytes.
TEST_F(ServerTest, ExistsReadsNoValue) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"SET", "big", std::string(800 * 1024, 'b')}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"SET", "small", "v"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "big", "nope", "big", "small"}), ":3\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "nope"}), ":0\r\n");
  EXPECT_EQ(engine_.gets(), 0u);
  ASSERT_TRUE(server_->Stop().ok());
  ASSERT_TRUE(mw_->Stop().ok());  // closes the window
  const WindowStats w = mw_->GetStats();
  EXPECT_EQ(w.batch.ops, 1u);        // the 800 KB SET
  EXPECT_EQ(w.interactive.ops, 6u);  // the small SET and five EXISTS keys
  EXPECT_DOUBLE_EQ(w.interactive.mean_block_bytes, 1.0 / 6.0);  // one byte written, none read
}

// A multi-key command stops at its first failing key and answers that error; the keys
// before it stay written or removed (MSET and DEL are not atomic), and the error says so,
// since the reply no longer carries DEL's count. Before, the error alone left a client
// believing nothing had been removed.
TEST_F(ServerTest, MultiKeyCommandStopsAtTheFirstError) {
  StartAll();
  Client c(port());
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", engine_.fail_key, "2", "c", "3"}),
            "-ERR IOError: injected failure (at pair 2 of 3; the pair before it is written, the rest not)\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "c"}), "*2\r\n$1\r\n1\r\n$-1\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", engine_.fail_key}), "-ERR IOError: injected failure\r\n");
  EXPECT_EQ(c.Cmd({"MSET", engine_.fail_key, "1", "d", "4"}), "-ERR IOError: injected failure\r\n");
  EXPECT_EQ(c.Cmd({"MSET", "d", "4", "e", "5", engine_.fail_key, "6"}),
            "-ERR IOError: injected failure (at pair 3 of 3; the 2 pairs before it are written, the rest not)\r\n");

  EXPECT_EQ(c.Cmd({"DEL", "a", "none", "d", engine_.fail_key, "e"}),
            "-ERR IOError: injected failure (at key 4 of 5; 2 keys before it removed, the rest not tried)\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "d", "e"}), "*3\r\n$-1\r\n$-1\r\n$1\r\n5\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "none", engine_.fail_key}),
            "-ERR IOError: injected failure (at key 2 of 2; 0 keys before it removed, the rest not tried)\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "e", engine_.fail_key}),
            "-ERR IOError: injected failure (at key 2 of 2; 1 key before it removed, the rest not tried)\r\n");
  EXPECT_EQ(c.Cmd({"DEL", engine_.fail_key, "x"}), "-ERR IOError: injected failure\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "e"}), ":0\r\n");
  EXPECT_EQ(c.Cmd({"PING"}), "+PONG\r\n");  // the connection goes on
}

// A connection reuses one command record for all its commands: nothing of a command
// (its found keys, count, error, values) shows in the next one's reply, after a long
// MGET (whose larger record is let go) as after a short one.
TEST_F(ServerTest, EachCommandStartsFromAFreshRecord) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"MSET", "a", "1", "b", "2"}), "+OK\r\n");
  std::vector<std::string> mget = {"MGET"};
  std::string want = "*100\r\n";
  for (int i = 0; i < 100; ++i) {
    mget.push_back(i % 2 == 0 ? "a" : "none" + std::to_string(i));
    want += i % 2 == 0 ? "$1\r\n1\r\n" : "$-1\r\n";
  }
  EXPECT_EQ(c.Cmd(mget), want);
  EXPECT_EQ(c.Cmd({"GET", "b"}), "$1\r\n2\r\n");
  EXPECT_EQ(c.Cmd({"GET", "none1"}), "$-1\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "a", "b", "a"}), ":3\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "b"}), ":1\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", engine_.fail_key}), "-ERR IOError: injected failure\r\n");
  EXPECT_EQ(c.Cmd({"GET", "a"}), "$1\r\n1\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "none", "b"}), "*2\r\n$-1\r\n$1\r\n2\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "a", "none"}), ":1\r\n");
  EXPECT_EQ(c.Cmd({"SET", "c", "3"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "c"}), "*2\r\n$-1\r\n$1\r\n3\r\n");
}

// A key the engine cannot hold (empty, or longer than its max_key_bytes) does not
// exist: reads answer nil, EXISTS and DEL count it as missing, as Redis answers for a key
// that was never set, and the other keys of the command are served. Writing one is
// refused. Before, the engine's InvalidArgument answered the whole command, after DEL
// had already removed the keys before it.
TEST_F(ServerTest, KeysTheEngineCannotHoldAreAbsent) {
  StartOn(memory_.get());
  Client c(port());
  const std::string long_key(64 * 1024 + 1, 'k');
  ASSERT_EQ(c.Cmd({"SET", "a", "1"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"GET", ""}), "$-1\r\n");
  EXPECT_EQ(c.Cmd({"GET", long_key}), "$-1\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "", long_key}), "*3\r\n$1\r\n1\r\n$-1\r\n$-1\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "a", "", long_key, "a"}), ":2\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "", long_key}), ":0\r\n");
  EXPECT_EQ(c.Cmd({"DEL", "a", ""}), ":1\r\n");
  EXPECT_EQ(c.Cmd({"EXISTS", "a"}), ":0\r\n");
  EXPECT_EQ(c.Cmd({"SET", "", "v"}), "-ERR invalid argument: empty key\r\n");
  EXPECT_EQ(c.Cmd({"SET", long_key, "v"}).rfind("-ERR invalid argument: key of 65537 bytes", 0), 0u);
  EXPECT_EQ(memory_->Count(), 0u);
}

// An MSET whose arguments cannot all be stored (an empty key, a value over the
// middleware's max_value_bytes) is refused before any pair is written, as Redis checks a
// command before running it. Before, the pairs ahead of the bad one were written and the
// reply was the error.
TEST_F(ServerTest, MsetWithABadArgumentWritesNothing) {
  MiddlewareOptions mo;
  mo.max_value_bytes = 1024;
  StartOn(memory_.get(), TestServerOptions(), mo);
  Client c(port());
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", "", "2", "c", "3"}), "-ERR invalid argument: empty key\r\n");
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", "b", std::string(1025, 'v')}),
            "-ERR invalid argument: value of 1025 bytes exceeds max_value_bytes 1024\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "a", "b", "c"}), "*3\r\n$-1\r\n$-1\r\n$-1\r\n");
  EXPECT_EQ(memory_->Count(), 0u);
  EXPECT_EQ(c.Cmd({"MSET", "a", "1", "b", std::string(1024, 'v')}), "+OK\r\n");
  EXPECT_EQ(memory_->Count(), 2u);
}

// Integer arguments follow Redis's rules (string2ll): no sign on 0, no leading zeros,
// no '+'. Before, SELECT 00 and SELECT -0 were OK and HELLO 03 switched to RESP3.
TEST_F(ServerTest, IntegerArgumentsParseAsInRedis) {
  StartAll();
  Client c(port());
  for (const char* bad : {"00", "-0", "+0", "01", " 0", "0 ", ""}) {
    EXPECT_EQ(c.Cmd({"SELECT", bad}), "-ERR value is not an integer or out of range\r\n") << bad;
  }
  EXPECT_EQ(c.Cmd({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"SELECT", "-1"}), "-ERR DB index is out of range\r\n");
  for (const char* bad : {"03", "+3", "3.0"}) {
    EXPECT_EQ(c.Cmd({"HELLO", bad}), "-ERR Protocol version is not an integer or out of range\r\n") << bad;
  }
  EXPECT_EQ(c.Cmd({"GET", "missing"}), "$-1\r\n");  // still RESP2
}

// COMMAND INFO without names describes every command (as COMMAND does); an unknown name
// is a null, the bulk null of RESP2 ($-1) as in Redis 7. Under RESP3 an entry's flags, its
// ACL categories and its empty lists are sets (~), as Redis 7 sends them.
TEST_F(ServerTest, CommandInfo) {
  StartAll();
  Client c(port());
  EXPECT_EQ(c.Cmd({"COMMAND", "INFO"}), c.Cmd({"COMMAND"}));
  EXPECT_EQ(c.Cmd({"COMMAND", "INFO", "GET", "nosuch"}),
            "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"
            "*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*0\r\n*0\r\n$-1\r\n");
  ASSERT_EQ(c.Cmd({"HELLO", "3"}).rfind("%7\r\n", 0), 0u);
  EXPECT_EQ(c.Cmd({"COMMAND", "INFO", "nosuch"}), "*1\r\n_\r\n");
  EXPECT_EQ(c.Cmd({"COMMAND", "INFO", "get"}),
            "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"
            "~3\r\n+@read\r\n+@string\r\n+@fast\r\n~0\r\n~0\r\n~0\r\n");
  EXPECT_NE(c.Cmd({"COMMAND"}).find("\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n"), std::string::npos);
}

// A full class queue is answered -OVERLOADED (retry later), not waited for.
TEST_F(ServerTest, FullQueueIsOverloaded) {
  MiddlewareOptions mo;
  mo.queue_capacity = 1;
  StartAll(TestServerOptions(), mo);
  Client a(port()), b(port());
  ASSERT_EQ(a.Cmd({"SET", "k", "v"}), "+OK\r\n");
  engine_.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v").ok()); });
  ASSERT_TRUE(engine_.WaitInflight(1));
  ASSERT_TRUE(a.Send(Multibulk({"GET", "k"})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kInteractive) == 1; }));
  EXPECT_EQ(b.Cmd({"GET", "k"}).rfind("-OVERLOADED interactive queue full", 0), 0u);
  engine_.OpenGate();
  holder.join();
  EXPECT_EQ(a.Reply(), "$1\r\nv\r\n");
  EXPECT_EQ(b.Cmd({"GET", "k"}), "$1\r\nv\r\n");
}

TEST_F(ServerTest, ConnectionAndIntrospectionCommands) {
  StartAll();
  Client c(port());
  EXPECT_EQ(c.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c.Cmd({"PING", "hi"}), "$2\r\nhi\r\n");
  EXPECT_EQ(c.Cmd({"ECHO", "x y"}), "$3\r\nx y\r\n");
  EXPECT_EQ(c.Cmd({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"SELECT", "1"}), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(c.Cmd({"FLUSHALL"}), "-ERR unknown command 'FLUSHALL', with args beginning with: \r\n");
  // As Redis 7: the arguments listed while the list is under 128 bytes, the last cut to
  // fit, and a NUL byte ending a name or an argument.
  const std::string y50(50, 'y');
  EXPECT_EQ(c.Cmd({"NOSUCH", y50, y50, y50, y50}),
            "-ERR unknown command 'NOSUCH', with args beginning with: '" + y50 + "' '" + y50 + "' '" +
                std::string(22, 'y') + "' \r\n");
  EXPECT_EQ(c.Cmd({std::string("GET\0x", 5), std::string("a\0b", 3), "c"}),
            "-ERR unknown command 'GET', with args beginning with: 'a' 'c' \r\n");
  EXPECT_EQ(c.Cmd({"HELLO", "4"}), "-NOPROTO sorry, this protocol version is not supported\r\n");
  const std::string hello = c.Cmd({"HELLO", "2", "SETNAME", "me"});
  EXPECT_EQ(hello.rfind("*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n", 0), 0u) << hello;
  EXPECT_EQ(c.Cmd({"CLIENT", "GETNAME"}), "$2\r\nme\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETNAME", "other"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "GETNAME"}), "$5\r\nother\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETINFO", "lib-ver", "go-redis(,go1.22)"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETINFO", "lib-name", "a b"}),
            "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETINFO", "LIB-VER", "1\n2"}),
            "-ERR LIB-VER cannot contain spaces, newlines or special characters.\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "SETINFO", "LIB-NAME", ""}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "ID"}).substr(0, 1), ":");
  // As Redis 7.0: the subcommand's arity, and an unknown name cut at its first NUL.
  EXPECT_EQ(c.Cmd({"CLIENT", "Setname"}), "-ERR wrong number of arguments for 'client|setname' command\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "GETNAME", "x"}), "-ERR wrong number of arguments for 'client|getname' command\r\n");
  EXPECT_EQ(c.Cmd({"client", std::string("No\0x", 4)}), "-ERR unknown subcommand 'No'. Try CLIENT HELP.\r\n");
  EXPECT_EQ(c.Cmd({"CLIENT", "HELP"}).rfind("*13\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n", 0),
            0u);
  EXPECT_EQ(c.Cmd({"CONFIG", "GET", "save"}), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(c.Cmd({"CONFIG", "GET", "appendonly"}), "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
  EXPECT_EQ(c.Cmd({"CONFIG", "GET", "nothing*"}), "*0\r\n");
  EXPECT_EQ(c.Cmd({"CONFIG", "SET", "save", ""}).substr(0, 4), "-ERR");
  const std::string docs = c.Cmd({"COMMAND", "DOCS", "get", "nosuch"});
  EXPECT_EQ(docs.rfind("*2\r\n$3\r\nget\r\n*10\r\n$7\r\nsummary\r\n$22\r\nGet the value of a key\r\n", 0), 0u) << docs;
  const std::string count = c.Cmd({"COMMAND", "COUNT"});
  const std::string all = c.Cmd({"COMMAND"});
  EXPECT_EQ(all.rfind("*" + count.substr(1, count.size() - 3) + "\r\n*10\r\n$3\r\nget\r\n:2\r\n", 0), 0u) << all;
  EXPECT_EQ(c.Cmd({"NVMW.CLASS"}), "$4\r\nauto\r\n");
  EXPECT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"NVMW.CLASS"}), "$5\r\nbatch\r\n");
  EXPECT_EQ(c.Cmd({"NVMW.CLASS", "bulk"}), "-ERR request class must be interactive, batch or auto\r\n");
  EXPECT_EQ(c.Cmd({"INFO", "keyspace"}), "$12\r\n# Keyspace\r\n\r\n");  // as Redis: no db0 line while empty
  ASSERT_EQ(c.Cmd({"SET", "k", "v"}), "+OK\r\n");
  const std::string info = c.Cmd({"INFO"});
  EXPECT_NE(info.find("redis_version:"), std::string::npos);
  EXPECT_NE(info.find("connected_clients:1\r\n"), std::string::npos) << info;
  EXPECT_EQ(info.find("used_memory:0\r\n"), std::string::npos) << info;  // resident memory
  EXPECT_NE(info.find("used_memory:"), std::string::npos) << info;
  EXPECT_NE(info.find("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"), std::string::npos) << info;
  // What health and readiness checks look for, in Redis's section order.
  EXPECT_NE(info.find("\r\n# Persistence\r\nloading:0\r\n\r\n# Stats\r\n"), std::string::npos) << info;
  EXPECT_NE(info.find("\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n# Keyspace\r\n"),
            std::string::npos) << info;
  EXPECT_EQ(c.Cmd({"INFO", "Replication"}), "$48\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
  const std::string keyspace = c.Cmd({"INFO", "keyspace"});
  EXPECT_EQ(keyspace.find("redis_version"), std::string::npos);
  EXPECT_NE(keyspace.find("db0:keys=1"), std::string::npos);
  const std::string stats = c.Cmd({"NVMW.STATS"});
  EXPECT_NE(stats.find("{\"window\":{\"seq\":"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"threads\":{\"interactive\":1,\"batch\":1}"), std::string::npos) << stats;
  EXPECT_EQ(c.Cmd({"QUIT"}), "+OK\r\n");
  EXPECT_TRUE(c.ClosedByServer());
}

// HELLO 3 switches the connection to RESP3 replies: nulls and maps change, the rest not.
TEST_F(ServerTest, Resp3AfterHello3) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"SET", "k", "v"}), "+OK\r\n");
  const std::string hello = c.Cmd({"HELLO", "3"});
  EXPECT_EQ(hello.rfind("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n", 0), 0u) << hello;
  EXPECT_NE(hello.find("$5\r\nproto\r\n:3\r\n"), std::string::npos) << hello;
  EXPECT_EQ(c.Cmd({"GET", "missing"}), "_\r\n");
  EXPECT_EQ(c.Cmd({"MGET", "k", "missing"}), "*2\r\n$1\r\nv\r\n_\r\n");
  EXPECT_EQ(c.Cmd({"CONFIG", "GET", "save"}), "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(c.Cmd({"COMMAND", "DOCS", "nosuch"}), "%0\r\n");
  EXPECT_EQ(c.Cmd({"COMMAND", "DOCS", "ping"}),
            "%1\r\n$4\r\nping\r\n%5\r\n$7\r\nsummary\r\n$15\r\nPing the server\r\n$5\r\nsince\r\n$5\r\n1.0.0\r\n"
            "$5\r\ngroup\r\n$10\r\nconnection\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*1\r\n%3\r\n"
            "$4\r\nname\r\n$7\r\nmessage\r\n$4\r\ntype\r\n$6\r\nstring\r\n$5\r\nflags\r\n~1\r\n+optional\r\n");
  EXPECT_EQ(c.Cmd({"HELLO", "2"}).rfind("*14\r\n", 0), 0u);
  EXPECT_EQ(c.Cmd({"GET", "missing"}), "$-1\r\n");
}

TEST_F(ServerTest, NvmwClassDecidesTheRequestClass) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.Cmd({"SET", "k" + std::to_string(i), "v"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "interactive"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"GET", "k1"}), "$1\r\nv\r\n");
  ASSERT_TRUE(server_->Stop().ok());
  ASSERT_TRUE(mw_->Stop().ok());  // closes the window
  EXPECT_EQ(mw_->GetStats().batch.ops, 5u);
  EXPECT_EQ(mw_->GetStats().interactive.ops, 1u);
}

// Without batch loops, interactive requests with a free permit run on the io thread and
// batch requests always run on a batch worker, so a large write never holds up the loop.
TEST_F(ServerTest, BatchRequestsRunOnWorkersInteractiveOnTheLoop) {
  std::mutex mu;
  std::map<std::string, std::thread::id> ran_on;
  engine_.on_op = [&](std::string_view key) {
    std::lock_guard<std::mutex> lock(mu);
    ran_on[std::string(key)] = std::this_thread::get_id();
  };
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 0;
  StartAll(o);
  Client c(port());
  ASSERT_EQ(c.Cmd({"SET", "i1", "v"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"GET", "i1"}), "$1\r\nv\r\n");
  ASSERT_EQ(c.Cmd({"SET", "big", std::string(64 * 1024, 'x')}), "+OK\r\n");  // batch by size
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"SET", "b1", "v"}), "+OK\r\n");
  std::lock_guard<std::mutex> lock(mu);
  const std::thread::id loop = ran_on["i1"];
  EXPECT_NE(loop, std::this_thread::get_id());
  EXPECT_NE(ran_on["big"], loop);
  EXPECT_NE(ran_on["b1"], loop);
}

// With run_on_loop off an interactive request with a free permit still goes to a worker:
// while the engine holds it, the loop answers another connection.
TEST_F(ServerTest, WithoutRunOnLoopWorkersRunEverything) {
  ServerOptions o = TestServerOptions();
  o.run_on_loop = false;
  StartAll(o);
  Client a(port()), b(port());
  ASSERT_EQ(a.Cmd({"SET", "k", "v"}), "+OK\r\n");
  engine_.CloseGate();
  ASSERT_TRUE(a.Send(Multibulk({"GET", "k"})));
  ASSERT_TRUE(engine_.WaitInflight(1));  // the GET is in the engine, permit free before it
  EXPECT_EQ(b.Cmd({"PING"}), "+PONG\r\n");  // so the loop is not the thread running it
  engine_.OpenGate();
  EXPECT_EQ(a.Reply(), "$1\r\nv\r\n");
}

TEST_F(ServerTest, InlineCommands) {
  StartAll();
  Client c(port());
  ASSERT_TRUE(c.Send("PING\r\nset k \"a b\"\r\nget k\n"));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_EQ(c.Reply(), "$3\r\na b\r\n");
}

TEST_F(ServerTest, PipelinedRepliesKeepRequestOrder) {
  // A thread outside the server takes the only interactive permit now and then, so some of
  // the server's requests find none free and are run by a worker, completing out of the
  // loop, and the others run on the loop.
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  engine_.on_op = [&](std::string_view key) {
    if (key[0] == 'a' || key[0] == 'b') {
      std::lock_guard<std::mutex> lock(mu);
      ran_on.insert(std::this_thread::get_id());
    }
  };
  engine_.put_delay_ns = 20000;
  StartAll();
  std::atomic<bool> done{false};
  std::thread rival([&] {
    while (!done.load()) {
      ASSERT_TRUE(mw_->Put("rival", "v", RequestClass::kInteractive).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // the permit is free meanwhile
    }
  });
  constexpr int kN = 500;
  auto run = [&](const std::string& prefix, std::vector<std::string>* replies) {
    Client c(port());
    std::string batch;
    for (int i = 0; i < kN; ++i) {
      batch += Multibulk({"SET", prefix + std::to_string(i), "value" + std::to_string(i)});
      batch += Multibulk({"GET", prefix + std::to_string(i)});
    }
    batch += "PING\r\n";
    c.Send(batch);
    for (int i = 0; i < 2 * kN + 1; ++i) replies->push_back(c.Reply());
  };
  std::vector<std::string> a, b;
  std::thread ta(run, "a", &a);
  std::thread tb(run, "b", &b);
  ta.join();
  tb.join();
  done = true;
  rival.join();
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GE(ran_on.size(), 2u);  // the io thread and at least one worker
  }
  for (const auto* r : {&a, &b}) {
    ASSERT_EQ(r->size(), 2u * kN + 1);
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ((*r)[2 * i], "+OK\r\n") << i;
      ASSERT_EQ((*r)[2 * i + 1], Bulk("value" + std::to_string(i))) << i;
    }
    EXPECT_EQ(r->back(), "+PONG\r\n");
  }
  EXPECT_EQ(server_->Stats().commands, 2u * (2 * kN + 1));
}

// With an output cap of one byte every reply pauses the connection until it is written;
// thousands of pipelined commands still all run, in order.
TEST_F(ServerTest, TinyOutputCapStillServesAPipeline) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = 1;
  StartAll(o);
  Client c(port());
  constexpr int kN = 20000;
  std::string batch;
  for (int i = 0; i < kN; ++i) batch += Multibulk({"ECHO", std::to_string(i)});
  std::thread sender([&] { c.Send(batch); });
  for (int i = 0; i < kN; ++i) ASSERT_EQ(c.Reply(), Bulk(std::to_string(i))) << i;
  sender.join();
  EXPECT_EQ(server_->Stats().output_buffer_closes, 0u);
}

TEST_F(ServerTest, LargeValuesRoundTrip) {
  StartAll();
  Client c(port());
  std::string big(800 * 1024, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  ASSERT_EQ(c.Cmd({"SET", "big", big}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"GET", "big"}), Bulk(big));
  EXPECT_EQ(c.Cmd({"MGET", "big", "none", "big"}), "*3\r\n" + Bulk(big) + "$-1\r\n" + Bulk(big));
}

// A request that finds no free permit is run by a worker; meanwhile the loop answers
// other connections, and the reply arrives when the worker is done.
TEST_F(ServerTest, WaitingRequestDoesNotBlockTheLoop) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"SET", "k", "v"}), "+OK\r\n");
  engine_.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v").ok()); });
  ASSERT_TRUE(engine_.WaitInflight(1));  // the only interactive permit is taken
  ASSERT_TRUE(c.Send(Multibulk({"GET", "k"}) + Multibulk({"PING"})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kInteractive) == 1; }));
  Client other(port());
  EXPECT_EQ(other.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(other.Cmd({"ECHO", "still here"}), "$10\r\nstill here\r\n");
  engine_.OpenGate();
  holder.join();
  EXPECT_EQ(c.Reply(), "$1\r\nv\r\n");
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
}

// QUIT in a pipeline with more behind it: every reply before it, and its +OK, reach the
// client, then the connection ends. The bytes after QUIT are never run; left unread in the
// socket they would make the close a reset, and the kernel would drop the replies it had
// not sent yet (Redis reads and drops them; so does nvmw, until the client closes too).
TEST_F(ServerTest, QuitMidPipelineDeliversEveryReplyBeforeIt) {
  StartAll();
  Client c(port());
  const std::string value(100 * 1024, 'e');
  std::string pipeline;
  for (int i = 0; i < 20; ++i) pipeline += Multibulk({"ECHO", value});
  pipeline += Multibulk({"QUIT"}) + Multibulk({"SET", "after-quit", std::string(64 * 1024, 'x')});
  ASSERT_TRUE(c.Send(pipeline));
  const std::string echoed = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  for (int i = 0; i < 20; ++i) ASSERT_EQ(c.Reply(), echoed) << i;
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_TRUE(c.ClosedByServer());
  EXPECT_EQ(engine_.Count(), 0u);
}

TEST_F(ServerTest, ProtocolErrorIsAnsweredThenClosed) {
  ServerOptions o = TestServerOptions();
  o.max_bulk_bytes = 1000;
  o.max_args = 8;
  StartAll(o);
  {
    Client c(port());
    ASSERT_TRUE(c.Send("*1\r\n$x\r\n"));
    EXPECT_EQ(c.Reply(), "-ERR Protocol error: invalid bulk length\r\n");
    EXPECT_TRUE(c.ClosedByServer());
  }
  {
    Client c(port());
    EXPECT_EQ(c.Cmd({"SET", "k", std::string(1000, 'x')}), "+OK\r\n");
    ASSERT_TRUE(c.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1001\r\n"));
    EXPECT_EQ(c.Reply().rfind("-ERR Protocol error: invalid bulk length", 0), 0u);
    EXPECT_TRUE(c.ClosedByServer());
  }
  {
    Client c(port());
    ASSERT_TRUE(c.Send("*9\r\n"));
    EXPECT_EQ(c.Reply().rfind("-ERR Protocol error: too many arguments", 0), 0u);
    EXPECT_TRUE(c.ClosedByServer());
  }
  EXPECT_EQ(server_->Stats().protocol_errors, 3u);
  Client ok(port());
  EXPECT_EQ(ok.Cmd({"PING"}), "+PONG\r\n");
}

TEST_F(ServerTest, PasswordRequiresAuth) {
  ServerOptions o = TestServerOptions();
  o.password = "s3cret";
  StartAll(o);
  Client c(port());
  EXPECT_EQ(c.Cmd({"GET", "k"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(c.Cmd({"AUTH", "wrong"}), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_EQ(c.Cmd({"AUTH", "admin", "s3cret"}).substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(c.Cmd({"SET", "k", "v"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(engine_.Count(), 0u);
  EXPECT_EQ(c.Cmd({"AUTH", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(c.Cmd({"SET", "k", "v"}), "+OK\r\n");
  Client h(port());
  EXPECT_EQ(h.Cmd({"HELLO", "2"}).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(h.Cmd({"HELLO", "2", "AUTH", "default", "s3cret"}).substr(0, 4), "*14\r");
  EXPECT_EQ(h.Cmd({"GET", "k"}), "$1\r\nv\r\n");
  EXPECT_EQ(server_->Stats().auth_failures, 2u);
  // Once authenticated, a connection sends what it likes (the caps below are lifted).
  EXPECT_EQ(h.Cmd({"MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", std::string(20000, 'v')}), "+OK\r\n");
}

// As Redis: before AUTH, a command of more than 10 arguments or an argument over 16 KiB is
// a protocol error that closes the connection, refused from its header, so a client without
// the password cannot make the server hold a large request.
TEST_F(ServerTest, UnauthenticatedClientsSendOnlySmallCommands) {
  ServerOptions o = TestServerOptions();
  o.password = "s3cret";
  StartAll(o);
  Client a(port());
  EXPECT_EQ(a.Cmd({"EXISTS", "a", "b", "c", "d", "e", "f", "g", "h", "i"}), "-NOAUTH Authentication required.\r\n");
  ASSERT_TRUE(a.Send("*11\r\n"));
  EXPECT_EQ(a.Reply(), "-ERR Protocol error: unauthenticated multibulk length\r\n");
  EXPECT_TRUE(a.ClosedByServer());
  Client b(port());
  ASSERT_TRUE(b.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n"));
  EXPECT_EQ(b.Reply(), "-ERR Protocol error: unauthenticated bulk length\r\n");
  EXPECT_TRUE(b.ClosedByServer());
  EXPECT_EQ(server_->Stats().protocol_errors, 2u);
}

TEST_F(ServerTest, AuthWithoutPasswordConfiguredIsAnError) {
  StartAll();
  Client c(port());
  EXPECT_EQ(c.Cmd({"AUTH", "x"}).rfind("-ERR AUTH <password> called without any password configured", 0), 0u);
}

// An IPv4 address of this machine on an interface other than loopback (0 if none): a
// client connecting to it from here has it as its peer address.
in_addr_t HostAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return 0;
  in_addr_t found = 0;
  for (ifaddrs* i = list; i != nullptr && found == 0; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_UP) == 0) continue;
    const in_addr_t a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    if ((ntohl(a) >> 24) != 127) found = a;
  }
  ::freeifaddrs(list);
  return found;
}

TEST_F(ServerTest, ProtectedModeRefusesOtherHostsWithoutAPassword) {
  const in_addr_t host = HostAddress();
  ASSERT_NE(host, 0u) << "this host has no IPv4 address besides loopback";
  ServerOptions o = TestServerOptions();
  o.bind = "0.0.0.0";
  StartAll(o);
  Client other(port(), true, host);
  ASSERT_TRUE(other.connected());
  const std::string denied = other.Reply();
  EXPECT_EQ(denied.rfind("-DENIED nvmw is running in protected mode", 0), 0u) << denied;
  EXPECT_NE(denied.find("--protected-mode no"), std::string::npos) << denied;
  EXPECT_TRUE(other.ClosedByServer());
  EXPECT_EQ(server_->Stats().rejected_connections, 1u);
  EXPECT_EQ(server_->Stats().connections_total, 0u);
  Client local(port());
  EXPECT_EQ(local.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(local.Cmd({"CONFIG", "GET", "protected-mode"}), "*2\r\n$14\r\nprotected-mode\r\n$3\r\nyes\r\n");
}

TEST_F(ServerTest, APasswordServesOtherHosts) {
  const in_addr_t host = HostAddress();
  ASSERT_NE(host, 0u) << "this host has no IPv4 address besides loopback";
  ServerOptions o = TestServerOptions();
  o.bind = "0.0.0.0";
  o.password = "s3cret";
  StartAll(o);
  Client other(port(), true, host);
  EXPECT_EQ(other.Cmd({"PING"}), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(other.Cmd({"AUTH", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(other.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(server_->Stats().rejected_connections, 0u);
}

TEST_F(ServerTest, ProtectedModeOffServesOtherHosts) {
  const in_addr_t host = HostAddress();
  ASSERT_NE(host, 0u) << "this host has no IPv4 address besides loopback";
  ServerOptions o = TestServerOptions();
  o.bind = "0.0.0.0";
  o.protected_mode = false;
  StartAll(o);
  Client other(port(), true, host);
  EXPECT_EQ(other.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(other.Cmd({"CONFIG", "GET", "protected-mode"}), "*2\r\n$14\r\nprotected-mode\r\n$2\r\nno\r\n");
  EXPECT_EQ(server_->Stats().rejected_connections, 0u);
}

TEST_F(ServerTest, ClientCap) {
  ServerOptions o = TestServerOptions();
  o.max_clients = 2;
  StartAll(o);
  Client a(port()), b(port());
  EXPECT_EQ(a.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(b.Cmd({"PING"}), "+PONG\r\n");
  Client c(port());
  EXPECT_EQ(c.Reply(), "-ERR max number of clients reached\r\n");
  EXPECT_TRUE(c.ClosedByServer());
  EXPECT_EQ(server_->Stats().rejected_connections, 1u);
  EXPECT_EQ(server_->Stats().connections_current, 2u);
  EXPECT_EQ(a.Cmd({"QUIT"}), "+OK\r\n");
  ASSERT_TRUE(a.ClosedByServer());
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 1; }));
  Client d(port());
  EXPECT_EQ(d.Cmd({"PING"}), "+PONG\r\n");
}

// A client that quit and saw its connection end finds its place free again at once,
// even when another loop accepts its next connection: the cap is reached and released
// in a tight loop and nobody is told the server is full.
TEST_F(ServerTest, ClientCapReleasedBeforeTheClientSeesTheEnd) {
  ServerOptions o = TestServerOptions();
  o.max_clients = 1;
  o.io_threads = 2;
  StartAll(o);
  for (int i = 0; i < 500; ++i) {
    Client c(port());
    ASSERT_TRUE(c.Send(Multibulk({"PING"}) + Multibulk({"QUIT"})));
    ASSERT_EQ(c.Reply(), "+PONG\r\n") << "connection " << i;
    ASSERT_EQ(c.Reply(), "+OK\r\n");
    ASSERT_TRUE(c.ClosedByServer());
  }
  EXPECT_EQ(server_->Stats().rejected_connections, 0u);
}

// The client cap is lowered to what the open-file limit leaves room for, as Redis lowers
// maxclients: a client past it is told the server is full instead of waiting unanswered
// in the listening backlog (accept fails once the descriptors run out). The limit is low
// only while the server starts; the cap it set stays.
TEST_F(ServerTest, ClientCapFitsTheOpenFileLimit) {
  MiddlewareOptions mo;
  mo.window_s = 60;
  mo.queue_sample_s = 30;  // the monitor's reads of /proc/loadavg take a descriptor briefly
  mw_ = std::make_unique<Middleware>(mo);
  ASSERT_TRUE(mw_->Start(&engine_, 1, 1).ok());
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  int open_fds = 0;
  for (int fd = 0; fd < 65536; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) ++open_fds;
  }
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds + 48);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  ServerOptions o = TestServerOptions();
  o.port = 0;  // max_clients: the default, 10000
  server_ = std::make_unique<Server>();
  const Status started = server_->Start(mw_.get(), &engine_, o);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(started.ok()) << started.ToString();
  // 48 descriptors past those open: 32 kept for the process, 5 for the loops and the
  // listening socket (one io thread, one batch loop), 11 for clients (fewer if another
  // thread had a file open meanwhile).
  const size_t cap = server_->max_clients();
  EXPECT_LE(cap, 11u);
  EXPECT_GE(cap, 6u);
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < cap; ++i) {
    clients.push_back(std::make_unique<Client>(port()));
    ASSERT_EQ(clients.back()->Cmd({"PING"}), "+PONG\r\n") << i;
  }
  Client past(port());
  EXPECT_EQ(past.Reply(), "-ERR max number of clients reached\r\n");
  EXPECT_TRUE(past.ClosedByServer());
  const std::string info = clients[0]->Cmd({"INFO", "clients"});
  EXPECT_NE(info.find("\r\nmaxclients:" + std::to_string(cap) + "\r\n"), std::string::npos) << info;
  EXPECT_EQ(clients[0]->Cmd({"CONFIG", "GET", "maxclients"}),
            "*2\r\n$10\r\nmaxclients\r\n" + Bulk(std::to_string(cap)));
}

// A client that pipelines GETs of a large value and reads nothing: its connection stops
// being read at the output cap, others are served meanwhile, and once its output has
// made no progress for output_stall_timeout_s it is closed.
TEST_F(ServerTest, SlowReaderBlocksNobodyAndIsClosedWhenStalled) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = 256 * 1024;
  o.output_stall_timeout_s = 0.5;
  StartAll(o);
  Client setup(port());
  const std::string value(100 * 1024, 'v');
  ASSERT_EQ(setup.Cmd({"SET", "big", value}), "+OK\r\n");
  Client slow(port());
  int rcvbuf = 4096;
  ::setsockopt(slow.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  std::string gets;
  for (int i = 0; i < 200; ++i) gets += Multibulk({"GET", "big"});
  std::thread sender([&] { slow.Send(gets); });  // may block once the server stops reading
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(setup.Cmd({"GET", "big"}), Bulk(value));
    EXPECT_EQ(setup.Cmd({"PING"}), "+PONG\r\n");
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().output_buffer_closes == 1; }));
  ::shutdown(slow.fd(), SHUT_RDWR);  // unblocks the sender if it still waits
  sender.join();
  EXPECT_EQ(setup.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_LT(server_->Stats().commands, 200u + 42u);  // the slow client's GETs were not all run
}

// ---- MGET at the output cap ----

constexpr uint64_t kMgetCap = 1 << 20;
constexpr size_t kMgetValueBytes = 256 * 1024;
constexpr int kMgetValues = 64;  // 16 MiB: more than the socket buffers hold
// The bound on what one connection may hold: the cap, one value, and the array and bulk
// headers of the values queued when the cap is crossed.
constexpr uint64_t kMgetBound = kMgetCap + kMgetValueBytes + 4096;

// Stores kMgetValues distinct values under "mv-<i>"; returns them.
std::vector<std::string> StoreMgetValues(Client& c) {
  std::vector<std::string> values;
  for (int i = 0; i < kMgetValues; ++i) {
    std::string v(kMgetValueBytes, '\0');
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>(j * 31 + static_cast<size_t>(i) * 7 + 1);
    EXPECT_EQ(c.Cmd({"SET", "mv-" + std::to_string(i), v}), "+OK\r\n");
    values.push_back(std::move(v));
  }
  return values;
}

std::vector<std::string> MgetArgs(int n) {
  std::vector<std::string> args{"MGET"};
  for (int i = 0; i < n; ++i) args.push_back("mv-" + std::to_string(i));
  return args;
}

// The reply to MgetArgs(values.size()): the array of every stored value.
std::string MgetReply(const std::vector<std::string>& values) {
  std::string reply = "*" + std::to_string(values.size()) + "\r\n";
  for (const std::string& v : values) reply += Bulk(v);
  return reply;
}

// A fixed receive buffer (no autotuning), so that a client reading nothing leaves most
// of a 16 MiB reply queued at the server. Not smaller: with a window below the loopback
// segment size the transfer crawls once the client reads.
void ShrinkReceiveBuffer(Client& c) {
  int rcvbuf = 256 * 1024;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

// MGET over values worth 16 times the output cap from a client that reads nothing at
// first: the command pauses between two keys while the connection's queued output is at
// the cap, so the server holds at most the cap plus one value for it (without the pause
// it read all 64 values into the reply at once). Then the client reads: the reply is the
// whole array byte for byte, and the PING pipelined behind it is answered.
TEST_F(ServerTest, MgetPausesAtTheOutputCap) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  StartAll(o);
  Client setup(port());
  const std::vector<std::string> values = StoreMgetValues(setup);
  const std::string want = MgetReply(values);
  Client c(port());
  ShrinkReceiveBuffer(c);
  ASSERT_LT(server_->Stats().output_peak_bytes, kMgetCap);
  ASSERT_TRUE(c.Send(Multibulk(MgetArgs(kMgetValues)) + Multibulk({"PING"})));
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().output_peak_bytes >= kMgetCap; }));
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
  EXPECT_EQ(setup.Cmd({"PING"}), "+PONG\r\n");  // the loop serves others meanwhile
  EXPECT_EQ(c.Reply(), want);
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
  EXPECT_EQ(c.Cmd({"MGET", "mv-1", "missing"}), "*2\r\n" + Bulk(values[1]) + "$-1\r\n");
  EXPECT_EQ(server_->Stats().output_buffer_closes, 0u);
}

// The same with every GET run by a worker (run_on_loop off): the pause is taken when a
// worker's result comes back, and the reply is the same.
TEST_F(ServerTest, MgetPausesAtTheOutputCapWithWorkers) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  o.run_on_loop = false;
  StartAll(o);
  Client setup(port());
  const std::vector<std::string> values = StoreMgetValues(setup);
  const std::string want = MgetReply(values);
  Client c(port());
  ShrinkReceiveBuffer(c);
  ASSERT_TRUE(c.Send(Multibulk(MgetArgs(kMgetValues)) + Multibulk({"ECHO", "next"})));
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().output_peak_bytes >= kMgetCap; }));
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
  EXPECT_EQ(c.Reply(), want);
  EXPECT_EQ(c.Reply(), "$4\r\nnext\r\n");
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
}

// Once part of an MGET's reply is queued (it reached the cap), its array length is sent:
// a failing key is then answered with the error in its place, and so is each key after
// it (not read). Below the cap the whole reply is still that one error.
TEST_F(ServerTest, MgetPastTheCapAnswersAnErrorInPlace) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  StartAll(o);
  Client c(port());
  const std::vector<std::string> values = StoreMgetValues(c);
  std::vector<std::string> args = MgetArgs(8);  // 2 MiB: past the cap
  args.push_back(engine_.fail_key);
  args.push_back("mv-8");
  args.push_back("missing");
  std::string want = "*11\r\n";
  for (int i = 0; i < 8; ++i) want += Bulk(values[static_cast<size_t>(i)]);
  for (int i = 0; i < 3; ++i) want += "-ERR IOError: injected failure\r\n";
  EXPECT_EQ(c.Cmd(args), want);
  EXPECT_EQ(c.Cmd({"MGET", "mv-0", engine_.fail_key}), "-ERR IOError: injected failure\r\n");
  EXPECT_EQ(c.Cmd({"PING"}), "+PONG\r\n");
}

// A client that leaves while its MGET is paused at the cap: the connection is freed
// (the sanitizer builds check nothing leaks) and the server goes on.
TEST_F(ServerTest, ClientLeavingAPausedMgetIsFreed) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  StartAll(o);
  Client setup(port());
  const std::vector<std::string> values = StoreMgetValues(setup);
  {
    Client c(port());
    ShrinkReceiveBuffer(c);
    ASSERT_TRUE(c.Send(Multibulk(MgetArgs(kMgetValues))));
    ASSERT_TRUE(WaitUntil([&] { return server_->Stats().output_peak_bytes >= kMgetCap; }));
  }  // closed with replies unread
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 1; }));
  EXPECT_EQ(setup.Cmd({"MGET", "mv-2", "mv-3"}), "*2\r\n" + Bulk(values[2]) + Bulk(values[3]));
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
}

// Stop with MGETs paused at the cap: the one whose client reads gets its whole reply
// (the drain resumes it as the socket empties); the one whose client has gone is closed
// at once, not held until stop_timeout_s.
TEST_F(ServerTest, StopDrainsAPausedMget) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  o.stop_timeout_s = 3600;
  StartAll(o);
  Client setup(port());
  const std::vector<std::string> values = StoreMgetValues(setup);
  const std::string want = MgetReply(values);
  const uint64_t commands = server_->Stats().commands;
  Client reader(port());
  ShrinkReceiveBuffer(reader);
  ASSERT_TRUE(reader.Send(Multibulk(MgetArgs(kMgetValues))));
  auto gone = std::make_unique<Client>(port());
  ShrinkReceiveBuffer(*gone);
  ASSERT_TRUE(gone->Send(Multibulk(MgetArgs(kMgetValues))));
  // Both MGETs started; neither client reads, so they pause at the cap.
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().commands == commands + 2; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    EXPECT_TRUE(server_->Stop().ok());
    stopped = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return !Client(port()).connected(); }));
  gone.reset();  // leaves with its MGET paused
  // The idle connection and the one left are closed; the reader's MGET waits for it.
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 1; }));
  EXPECT_FALSE(stopped.load());
  EXPECT_EQ(reader.Reply(), want);
  EXPECT_TRUE(reader.ClosedByServer());
  stopper.join();
  EXPECT_EQ(server_->Stats().connections_current, 0u);
  EXPECT_LE(server_->Stats().output_peak_bytes, kMgetBound);
}

// Timeouts longer than the clock can count (infinity, 1e300 s) are never reached: a
// reader that reads nothing for several stall checks is not closed, and Stop waits for
// it to read its reply. (Converted to nanoseconds without saturating, both had always
// passed: the stalled reader was closed at the next check, and Stop closed it at once.)
TEST_F(ServerTest, TimeoutsTooLongForTheClockAreNeverReached) {
  ServerOptions o = TestServerOptions();
  o.max_output_bytes = kMgetCap;
  o.output_stall_timeout_s = std::numeric_limits<double>::infinity();
  o.stop_timeout_s = 1e300;
  StartAll(o);
  Client setup(port());
  const std::vector<std::string> values = StoreMgetValues(setup);
  const std::string want = MgetReply(values);
  Client reader(port());
  ShrinkReceiveBuffer(reader);
  ASSERT_TRUE(reader.Send(Multibulk(MgetArgs(kMgetValues))));
  // The MGET reaches the cap and pauses there; the reader reads nothing while several
  // stall checks (one per 100 ms loop tick) see its output at the cap.
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().output_peak_bytes >= kMgetCap; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(server_->Stats().output_buffer_closes, 0u);
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    EXPECT_TRUE(server_->Stop().ok());
    stopped = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return !Client(port()).connected(); }));
  // The loops have begun the drain (Stop woke them) and set its deadline.
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(stopped.load());
  EXPECT_EQ(reader.Reply(), want);
  EXPECT_TRUE(reader.ClosedByServer());
  stopper.join();
  EXPECT_EQ(server_->Stats().output_buffer_closes, 0u);
}

TEST_F(ServerTest, StopFinishesTheCommandInFlightAndThoseAlreadyRead) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"PING"}), "+PONG\r\n");
  engine_.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v").ok()); });
  ASSERT_TRUE(engine_.WaitInflight(1));
  // The second SET is read with the first and waits in the connection's buffer.
  ASSERT_TRUE(c.Send(Multibulk({"SET", "acked", "1"}) + Multibulk({"SET", "read", "2"})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kInteractive) == 1; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    ASSERT_TRUE(server_->Stop().ok());
    stopped = true;
  });
  // New connections are refused once the server stops listening.
  ASSERT_TRUE(WaitUntil([&] { return !Client(port()).connected(); }));
  EXPECT_FALSE(stopped.load());
  engine_.OpenGate();
  holder.join();
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_EQ(c.Reply(), "+OK\r\n");  // commands already read are run
  EXPECT_TRUE(c.ClosedByServer());
  stopper.join();
  EXPECT_TRUE(engine_.Exists("acked").ok());
  EXPECT_TRUE(engine_.Exists("read").ok());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

// Out of file descriptors, accept fails; the server pauses accepting for a moment
// (rather than spinning on a listening socket it cannot accept from) and takes the
// waiting connection once descriptors are available again.
TEST_F(ServerTest, AcceptResumesAfterRunningOutOfDescriptors) {
  // Every descriptor the server and middleware keep (the monitor's /proc/loadavg among
  // them) is open once StartAll returns, so the count below leaves room for exactly one.
  StartAll();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  int open_fds = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) open_fds = fd + 1;
  }
  std::vector<int> fillers;  // descriptors below the highest one are taken too
  for (int fd = 0; fd < open_fds; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) fillers.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds + 1);  // room for the client's socket only
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  Client c(port());
  const bool connected = c.connected();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const uint64_t accepted_while_low = server_->Stats().connections_total;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  for (int fd : fillers) ::close(fd);
  ASSERT_TRUE(connected);
  EXPECT_EQ(accepted_while_low, 0u);
  EXPECT_EQ(c.Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(server_->Stats().connections_total, 1u);
}

TEST_F(ServerTest, ConcurrentStopsAreSafe) {
  StartAll();
  Client c(port());
  ASSERT_EQ(c.Cmd({"PING"}), "+PONG\r\n");
  std::vector<std::thread> stoppers;
  for (int i = 0; i < 4; ++i) stoppers.emplace_back([&] { EXPECT_TRUE(server_->Stop().ok()); });
  for (auto& t : stoppers) t.join();
  EXPECT_TRUE(c.ClosedByServer());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

TEST_F(ServerTest, SeveralIoThreads) {
  ServerOptions o = TestServerOptions();
  o.io_threads = 2;
  StartAll(o);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(std::make_unique<Client>(port()));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(clients[i]->Cmd({"SET", "k" + std::to_string(i), std::to_string(i)}), "+OK\r\n");
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(clients[(i + 3) % 8]->Cmd({"GET", "k" + std::to_string(i)}), Bulk(std::to_string(i)));
  }
  EXPECT_EQ(server_->Stats().connections_current, 8u);
}

std::string ThreadName() {
  char name[16] = {};
  ::pthread_getname_np(::pthread_self(), name, sizeof name);
  return name;
}

// Records the name of the thread the first engine operation on each key ran on.
class ThreadsByKey {
 public:
  explicit ThreadsByKey(TestEngine* e) {
    e->on_op = [this](std::string_view key) {
      std::lock_guard<std::mutex> lock(mu_);
      names_.emplace(std::string(key), ThreadName());
    };
  }
  std::string operator[](const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return names_[key];
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> names_;
};

TEST_F(ServerTest, BatchIoThreadsAreValidated) {
  StartAll();
  ServerOptions o = TestServerOptions();
  o.port = 0;
  o.batch_io_threads = -1;
  EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument());
  o.batch_io_threads = 65;
  EXPECT_TRUE(Server().Start(mw_.get(), &engine_, o).IsInvalidArgument());
}

// A connection that starts sending a large value is moved to the batch loop, with the
// commands it pipelined behind it; the interactive loop never receives the value, and
// the connection's later small requests run on the batch loop.
TEST_F(ServerTest, LargeValueMovesItsConnectionToTheBatchLoop) {
  ThreadsByKey ran_on(&engine_);
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 1;
  StartAll(o);
  Client inter(port()), bulk(port());
  ASSERT_EQ(inter.Cmd({"SET", "i1", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["i1"], "nvmw-io0");  // caller-runs on the accepting loop
  std::string big(800 * 1024, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(bulk.Send(Multibulk({"SET", "big", big}) + Multibulk({"GET", "big"}) + Multibulk({"SET", "b1", "v"}) +
                        Multibulk({"PING"})));
  EXPECT_EQ(bulk.Reply(), "+OK\r\n");
  EXPECT_EQ(bulk.Reply(), Bulk(big));
  EXPECT_EQ(bulk.Reply(), "+OK\r\n");
  EXPECT_EQ(bulk.Reply(), "+PONG\r\n");
  EXPECT_EQ(server_->Stats().batch_moves, 1u);
  EXPECT_EQ(ran_on["big"], "nvmw-batch");  // batch requests still run on batch workers
  EXPECT_EQ(ran_on["b1"], "nvmw-bio0");    // a small one runs on the loop it is on now
  ASSERT_EQ(inter.Cmd({"SET", "i2", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["i2"], "nvmw-io0");
  ASSERT_EQ(bulk.Cmd({"SET", "big2", big}), "+OK\r\n");
  EXPECT_EQ(server_->Stats().batch_moves, 1u);  // already there
  EXPECT_EQ(inter.Cmd({"GET", "big2"}), Bulk(big));
  EXPECT_EQ(server_->Stats().connections_current, 2u);
}

// A batch loop hands batch requests to the batch workers, also with a batch permit free;
// when none is free the request waits for one and the loop serves its other connections.
TEST_F(ServerTest, BatchLoopLeavesBatchRequestsToTheWorkers) {
  ThreadsByKey ran_on(&engine_);
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 1;
  StartAll(o);  // one batch permit
  Client a(port()), b(port());
  ASSERT_EQ(a.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  ASSERT_EQ(b.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().batch_moves == 2u; }));
  ASSERT_EQ(a.Cmd({"SET", "free", std::string(256 * 1024, 'f')}), "+OK\r\n");
  ASSERT_EQ(a.Cmd({"MSET", "m1", "1", "m2", "2"}), "+OK\r\n");
  EXPECT_EQ(ran_on["free"], "nvmw-batch");
  EXPECT_EQ(ran_on["m1"], "nvmw-batch");
  EXPECT_EQ(ran_on["m2"], "nvmw-batch");

  engine_.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v", RequestClass::kBatch).ok()); });
  ASSERT_TRUE(engine_.WaitInflight(1));  // the one batch permit is taken
  ASSERT_TRUE(a.Send(Multibulk({"SET", "queued", std::string(256 * 1024, 'q')})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kBatch) == 1; }));
  EXPECT_EQ(b.Cmd({"PING"}), "+PONG\r\n");  // the batch loop is not waiting for a permit
  engine_.OpenGate();
  holder.join();
  EXPECT_EQ(a.Reply(), "+OK\r\n");
  EXPECT_EQ(ran_on["queued"], "nvmw-batch");
  EXPECT_EQ(a.Cmd({"GET", "queued"}), Bulk(std::string(256 * 1024, 'q')));
  ASSERT_TRUE(server_->Stop().ok());
  ASSERT_TRUE(mw_->Stop().ok());  // closes the window
  EXPECT_EQ(mw_->GetStats().batch.ops, 6u);  // free, m1, m2, holder, queued, the GET
}

TEST_F(ServerTest, NvmwClassMovesBetweenLoops) {
  ThreadsByKey ran_on(&engine_);
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 1;
  StartAll(o);
  Client c(port());
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  // The reply is written before the connection is handed to the batch loop.
  EXPECT_TRUE(WaitUntil([&] { return server_->Stats().batch_moves == 1u; }));
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "auto"}), "+OK\r\n");  // auto stays where it is
  ASSERT_EQ(c.Cmd({"SET", "s1", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["s1"], "nvmw-bio0");
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "interactive"}), "+OK\r\n");  // back to an accepting loop
  ASSERT_EQ(c.Cmd({"SET", "s2", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["s2"], "nvmw-io0");
  // An interactive connection keeps its loop whatever it sends.
  ASSERT_EQ(c.Cmd({"SET", "big", std::string(256 * 1024, 'x')}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"SET", "s3", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["s3"], "nvmw-io0");
  EXPECT_EQ(server_->Stats().batch_moves, 1u);
}

TEST_F(ServerTest, WithoutBatchLoopsNothingMoves) {
  ThreadsByKey ran_on(&engine_);
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 0;
  StartAll(o);
  Client c(port());
  ASSERT_EQ(c.Cmd({"SET", "big", std::string(256 * 1024, 'x')}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "auto"}), "+OK\r\n");
  ASSERT_EQ(c.Cmd({"SET", "s1", "v"}), "+OK\r\n");
  EXPECT_EQ(ran_on["s1"], "nvmw-io0");
  EXPECT_EQ(server_->Stats().batch_moves, 0u);
}

// Stop finishes a command in flight on a batch loop and closes its connection.
TEST_F(ServerTest, StopDrainsTheBatchLoops) {
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 2;
  o.batch_io_idle = true;
  StartAll(o);
  Client c(port());
  ASSERT_EQ(c.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");
  engine_.CloseGate();
  ASSERT_TRUE(c.Send(Multibulk({"SET", "acked", std::string(128 * 1024, 'y')})));
  ASSERT_TRUE(engine_.WaitInflight(1));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    ASSERT_TRUE(server_->Stop().ok());
    stopped = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return !Client(port()).connected(); }));
  EXPECT_FALSE(stopped.load());
  engine_.OpenGate();
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_TRUE(c.ClosedByServer());
  stopper.join();
  EXPECT_TRUE(engine_.Exists("acked").ok());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

// Many connections moving to two batch loops while others stay: every reply is right.
TEST_F(ServerTest, ManyConnectionsMoveConcurrently) {
  ServerOptions o = TestServerOptions();
  o.batch_io_threads = 2;
  StartAll(o);
  const std::string big(96 * 1024, 'z');
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      Client c(port());
      for (int i = 0; i < 10; ++i) {
        const std::string k = "k" + std::to_string(t) + "-" + std::to_string(i);
        const std::string v = (t % 2 == 0) ? big + k : k;
        if (c.Cmd({"SET", k, v}) != "+OK\r\n") ++wrong;
        if (c.Cmd({"GET", k}) != Bulk(v)) ++wrong;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(server_->Stats().batch_moves, 4u);  // the four connections sending large values
}


// ---- group commit (ServerOptions::group_commit) ----

// TestEngine that records each PutMany call's keys, and whose operations on "block"
// and "holder" wait until Release: a GET of "block" holds the io thread, so that what
// clients send meanwhile is read in one turn of the loop once it is released; a
// synchronous Put of "holder" holds the only interactive permit. Operations on "slow"
// wait until ReleaseSlow (or Release): a batch SET of "slow" holds a worker.
class RecordingEngine : public TestEngine {
 public:
  RecordingEngine() {
    on_op = [this](std::string_view key) {
      if (key == "slow") {
        std::unique_lock<std::mutex> lock(mu_);
        ++slow_held_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return slow_released_; });
        return;
      }
      if (key != "block" && key != "holder") return;
      std::unique_lock<std::mutex> lock(mu_);
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    };
  }
  void PutMany(const KeyValue* items, size_t n, Status* results) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::multiset<std::string> keys;
      for (size_t i = 0; i < n; ++i) keys.emplace(items[i].key);
      calls_.push_back(std::move(keys));
    }
    Engine::PutMany(items, n, results);
  }
  std::vector<std::multiset<std::string>> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Waits until n operations wait on "block" or "holder".
  bool WaitHeld(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return held_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    slow_released_ = true;
    cv_.notify_all();
  }
  // Waits until an operation waits on "slow"; ReleaseSlow lets it go on.
  bool WaitSlow() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return slow_held_ >= 1; });
  }
  void ReleaseSlow() {
    std::lock_guard<std::mutex> lock(mu_);
    slow_released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
  int slow_held_ = 0;
  bool slow_released_ = false;
  std::vector<std::multiset<std::string>> calls_;
};

class GroupCommitTest : public ServerTest {
 protected:
  void TearDown() override {
    recorder_.Release();  // also when a check failed while the loop was held
    ServerTest::TearDown();
  }
  // Connects a client and waits until the server has taken it in.
  std::unique_ptr<Client> Connect() {
    auto c = std::make_unique<Client>(port());
    EXPECT_EQ(c->Cmd({"PING"}), "+PONG\r\n");
    return c;
  }
  // Group commit gathering in every turn, however few descriptors it began with (the
  // default gathers only in busy turns).
  static ServerOptions Gathering() {
    ServerOptions o = TestServerOptions();
    o.group_min_ready = 1;
    return o;
  }
  // A memory engine that outlives the server (freed after TearDown).
  Engine* NewMemory() {
    engines_.push_back(NewMemoryEngine());
    return engines_.back().get();
  }
  // Holds the io thread inside x's GET of "block" (Release ends it; x gets a nil).
  void HoldLoop(Client* x) {
    ASSERT_TRUE(x->Send(Multibulk({"GET", "block"})));
    ASSERT_TRUE(recorder_.WaitHeld(1));
  }

  RecordingEngine recorder_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

// SETs of several connections read in one turn are committed in one PutMany; each gets
// its own reply: a value over max_value_bytes (refused by the middleware) and an empty
// key (refused by the engine, inside the group) are errors, the others succeed. A GET
// pipelined behind a grouped SET runs after the group, and sees its value.
TEST_F(GroupCommitTest, SetsReadInOneTurnAreCommittedTogether) {
  MiddlewareOptions mo;
  mo.max_value_bytes = 1024;
  StartOn(&recorder_, Gathering(), mo);
  auto x = Connect();
  auto a = Connect();
  auto b = Connect();
  auto c = Connect();
  auto d = Connect();
  auto e = Connect();
  HoldLoop(x.get());
  ASSERT_TRUE(a->Send(Multibulk({"SET", "a", "1"})));
  ASSERT_TRUE(b->Send(Multibulk({"SET", "b", std::string(1025, 'v')})));
  ASSERT_TRUE(c->Send(Multibulk({"SET", "", "3"})));
  ASSERT_TRUE(d->Send(Multibulk({"SET", "d", "4"})));
  ASSERT_TRUE(e->Send(Multibulk({"SET", "e", "5"}) + Multibulk({"GET", "e"}) + Multibulk({"SET", "e", "6"}) +
                      Multibulk({"GET", "e"})));
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(b->Reply(), "-ERR invalid argument: value of 1025 bytes exceeds max_value_bytes 1024\r\n");
  EXPECT_EQ(c->Reply(), "-ERR invalid argument: empty key\r\n");
  EXPECT_EQ(d->Reply(), "+OK\r\n");
  EXPECT_EQ(e->Reply(), "+OK\r\n");
  EXPECT_EQ(e->Reply(), Bulk("5"));
  EXPECT_EQ(e->Reply(), "+OK\r\n");
  EXPECT_EQ(e->Reply(), Bulk("6"));
  const auto calls = recorder_.Calls();
  ASSERT_EQ(calls.size(), 1u);  // e's second SET, alone in its group, is a plain Put
  EXPECT_EQ(calls[0], (std::multiset<std::string>{"", "a", "d", "e"}));
  EXPECT_EQ(x->Cmd({"MGET", "a", "b", "d", "e"}), "*4\r\n" + Bulk("1") + "$-1\r\n" + Bulk("4") + Bulk("6"));
  EXPECT_EQ(recorder_.Count(), 3u);
}

// One write of SET k v0, GET k, SET k v1, GET k, ...: every SET waits for its group
// and every GET behind it runs after it, so the replies come in order and each GET sees
// the SET before it, across group boundaries (DEL and EXISTS in between too).
TEST_F(GroupCommitTest, PipelineKeepsOrderAcrossGroups) {
  StartOn(&recorder_, Gathering());
  Client c(port());
  constexpr int kN = 300;
  std::string batch;
  for (int i = 0; i < kN; ++i) {
    const std::string v = "v" + std::to_string(i);
    batch += Multibulk({"SET", "k", v}) + Multibulk({"GET", "k"});
    if (i % 10 == 0) batch += Multibulk({"DEL", "k"}) + Multibulk({"EXISTS", "k"}) + Multibulk({"GET", "k"});
    batch += Multibulk({"SET", "other" + std::to_string(i % 7), v});
  }
  batch += "PING\r\n";
  ASSERT_TRUE(c.Send(batch));
  for (int i = 0; i < kN; ++i) {
    const std::string v = "v" + std::to_string(i);
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    ASSERT_EQ(c.Reply(), Bulk(v)) << i;
    if (i % 10 == 0) {
      ASSERT_EQ(c.Reply(), ":1\r\n") << i;
      ASSERT_EQ(c.Reply(), ":0\r\n") << i;
      ASSERT_EQ(c.Reply(), "$-1\r\n") << i;
    }
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
  }
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  for (int j = 0; j < 7; ++j) {
    const int last = kN - 1 - ((kN - 1 - j) % 7);
    EXPECT_EQ(c.Cmd({"GET", "other" + std::to_string(j)}), Bulk("v" + std::to_string(last))) << j;
  }
}

// Many connections SET distinct keys at once (their SETs meet in groups of varying
// size); each reply is +OK and every key reads back, with group commit by default, in
// every turn, and off, on the memory engine.
TEST_F(GroupCommitTest, ManyConnectionsSetConcurrently) {
  for (const int config : {0, 1, 2}) {
    SCOPED_TRACE(config);
    ServerOptions o;  // 0: the defaults
    if (config == 1) o.group_min_ready = 1;
    if (config == 2) o.group_commit = false;
    Engine* memory = NewMemory();
    StartOn(memory, o);
    constexpr int kClients = 16;
    constexpr int kKeys = 100;
    std::atomic<int> wrong{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kClients; ++t) {
      ts.emplace_back([&, t] {
        Client c(port());
        std::string batch;
        for (int i = 0; i < kKeys; ++i) {
          batch += Multibulk({"SET", "k" + std::to_string(t) + "-" + std::to_string(i), std::to_string(t * i)});
        }
        if (!c.Send(batch)) ++wrong;
        for (int i = 0; i < kKeys; ++i) {
          if (c.Reply() != "+OK\r\n") ++wrong;
        }
      });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(memory->Count(), static_cast<uint64_t>(kClients * kKeys));
    Client r(port());
    for (int t = 0; t < kClients; ++t) {
      for (int i = 0; i < kKeys; ++i) {
        ASSERT_EQ(r.Cmd({"GET", "k" + std::to_string(t) + "-" + std::to_string(i)}), Bulk(std::to_string(t * i)))
            << t << " " << i;
      }
    }
    EXPECT_TRUE(server_->Stop().ok());
    EXPECT_TRUE(mw_->Stop().ok());
    server_.reset();
    mw_.reset();
  }
}

// GETs of several connections read in one busy turn, among grouped SETs, each get their
// own key's value: a present key, a missing one, an empty key (nil), a key
// set by a SET of the same turn (its connection's, pipelined, in order), and a GET
// behind a grouped SET.
TEST_F(GroupCommitTest, GetsReadInOneTurnEachGetTheirOwnValue) {
  StartOn(&recorder_, Gathering());
  auto x = Connect();
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < 5; ++i) c.push_back(Connect());
  ASSERT_EQ(x->Cmd({"SET", "present", "here"}), "+OK\r\n");
  ASSERT_EQ(x->Cmd({"SET", "s", "old"}), "+OK\r\n");
  HoldLoop(x.get());
  ASSERT_TRUE(c[0]->Send(Multibulk({"GET", "present"})));
  ASSERT_TRUE(c[1]->Send(Multibulk({"GET", "missing"})));
  ASSERT_TRUE(c[2]->Send(Multibulk({"GET", ""})));
  ASSERT_TRUE(c[3]->Send(Multibulk({"GET", "s"}) + Multibulk({"SET", "s", "new"}) + Multibulk({"GET", "s"})));
  ASSERT_TRUE(c[4]->Send(Multibulk({"SET", "t", "1"}) + Multibulk({"GET", "t"}) + Multibulk({"GET", "present"})));
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  EXPECT_EQ(c[0]->Reply(), Bulk("here"));
  EXPECT_EQ(c[1]->Reply(), "$-1\r\n");
  EXPECT_EQ(c[2]->Reply(), "$-1\r\n");
  EXPECT_EQ(c[3]->Reply(), Bulk("old"));
  EXPECT_EQ(c[3]->Reply(), "+OK\r\n");
  EXPECT_EQ(c[3]->Reply(), Bulk("new"));
  EXPECT_EQ(c[4]->Reply(), "+OK\r\n");
  EXPECT_EQ(c[4]->Reply(), Bulk("1"));
  EXPECT_EQ(c[4]->Reply(), Bulk("here"));
}

// By default a turn gathers only when it began with group_min_ready (8) ready
// descriptors: three SETs in a turn run each alone; eight are committed together.
// group_min_ready outside [1, 256] is refused.
TEST_F(GroupCommitTest, GathersOnlyInABusyTurn) {
  for (const int bad : {0, 257}) {
    ServerOptions o = TestServerOptions();
    o.group_min_ready = bad;
    StartOn(&recorder_);
    Server other;
    EXPECT_TRUE(other.Start(mw_.get(), &recorder_, o).IsInvalidArgument()) << bad;
    EXPECT_TRUE(server_->Stop().ok());
    EXPECT_TRUE(mw_->Stop().ok());
    server_.reset();
    mw_.reset();
  }
  StartOn(&recorder_);
  auto x = Connect();
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < 8; ++i) c.push_back(Connect());
  HoldLoop(x.get());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c[i]->Send(Multibulk({"SET", "few" + std::to_string(i), "v"})));
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c[i]->Reply(), "+OK\r\n") << i;
  EXPECT_TRUE(recorder_.Calls().empty());
  // The loop is free again: hold it with a key that is not held (the gate instead).
  recorder_.CloseGate();
  ASSERT_TRUE(x->Send(Multibulk({"GET", "gated"})));
  ASSERT_TRUE(recorder_.WaitInflight(1));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(c[i]->Send(Multibulk({"SET", "many" + std::to_string(i), "v"})));
  recorder_.OpenGate();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c[i]->Reply(), "+OK\r\n") << i;
  const auto calls = recorder_.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].size(), 8u);
}

// A busy turn with thirteen connections' SETs ready runs a group as soon as it has
// gathered kGroupRunAt (8), before it reads the next connection, and the other five at
// the end of the turn. Each connection sends a GET of "probe" (run as it is read) and
// then its SET: the engine sees eight probes, a PutMany of their eight keys, the five
// other probes, then a PutMany of the five others; every connection is answered in
// order and every value is stored.
TEST_F(GroupCommitTest, BusyTurnRunsAGroupOnceItHasEightSets) {
  recorder_.record_order = true;
  StartOn(&recorder_);  // the defaults: a turn of thirteen ready descriptors gathers
  auto x = Connect();
  constexpr int kClients = 13;
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < kClients; ++i) c.push_back(Connect());
  HoldLoop(x.get());
  for (int i = 0; i < kClients; ++i) {
    const std::string k = std::to_string(i);
    ASSERT_TRUE(c[i]->Send(Multibulk({"GET", "probe"}) + Multibulk({"SET", "k" + k, "v" + k})));
  }
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(c[i]->Reply(), "$-1\r\n") << i;
    EXPECT_EQ(c[i]->Reply(), "+OK\r\n") << i;
  }
  const auto calls = recorder_.Calls();
  ASSERT_EQ(calls.size(), 2u);
  // The engine's operations in order, "block" left out: P for a probe, S for a SET.
  std::string seq;
  std::vector<std::multiset<std::string>> groups(1);
  for (const std::string& key : recorder_.Order()) {
    if (key == "block") continue;
    const char op = key == "probe" ? 'P' : 'S';
    if (op == 'P' && !seq.empty() && seq.back() == 'S') groups.emplace_back();
    if (op == 'S') groups.back().insert(key);
    seq += op;
  }
  EXPECT_EQ(seq, "PPPPPPPPSSSSSSSSPPPPPSSSSS");
  EXPECT_EQ(groups, calls);
  for (int i = 0; i < kClients; ++i) {
    const std::string k = std::to_string(i);
    EXPECT_EQ(x->Cmd({"GET", "k" + k}), Bulk("v" + k)) << i;
  }
  EXPECT_EQ(server_->Stats().group_commits, 2u);
  EXPECT_EQ(server_->Stats().grouped_sets, static_cast<uint64_t>(kClients));
}

// A connection that goes away while its SET waits in a group. b's batch SET of "slow"
// runs on a worker and completes while the loop is held; then b closes with a reset.
// The turn that takes b's completion gathers b's next SET, read with the first, into
// the group of a's, c's and d's SETs (d sent its SET and closed), and finds b gone as
// it writes b's first reply. Every SET the server read is committed, b's and d's
// included (a's GET behind its SET sees b's value); a and c are answered; b and d are
// freed with no reply, and the connection count comes back to what it was before them.
TEST_F(GroupCommitTest, ConnectionClosedWhileItsSetWaitsInAGroup) {
  MiddlewareOptions mo;
  mo.batch_threshold_bytes = 16;
  ServerOptions o = Gathering();
  o.batch_io_threads = 0;  // b's batch SET leaves it on this loop
  StartOn(&recorder_, o, mo);
  auto x = Connect();
  auto a = Connect();
  auto c = Connect();
  ASSERT_EQ(server_->Stats().connections_current, 3u);
  auto b = Connect();
  auto d = Connect();
  ASSERT_TRUE(b->Send(Multibulk({"SET", "slow", std::string(64, 's')}) + Multibulk({"SET", "b", "2"})));
  ASSERT_TRUE(recorder_.WaitSlow());  // on a worker, holding the only batch permit
  HoldLoop(x.get());
  ASSERT_TRUE(a->Send(Multibulk({"SET", "a", "1"}) + Multibulk({"GET", "b"})));
  ASSERT_TRUE(c->Send(Multibulk({"SET", "c", "3"})));
  ASSERT_TRUE(d->Send(Multibulk({"SET", "d", "4"})));
  d.reset();  // closed (FIN) behind its SET
  recorder_.ReleaseSlow();
  // The batch permit comes back once the worker has run b's completion, which handed b
  // back to the held loop.
  ASSERT_TRUE(mw_->Put("sync", "v", RequestClass::kBatch).ok());
  linger l{1, 0};
  ::setsockopt(b->fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  b.reset();  // closed with a reset
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(a->Reply(), Bulk("2"));
  EXPECT_EQ(c->Reply(), "+OK\r\n");
  const auto calls = recorder_.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::multiset<std::string>{"a", "b", "c", "d"}));
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 3; }));
  EXPECT_EQ(x->Cmd({"MGET", "a", "b", "c", "d"}), "*4\r\n" + Bulk("1") + Bulk("2") + Bulk("3") + Bulk("4"));
  EXPECT_EQ(c->Cmd({"SET", "c", "5"}), "+OK\r\n");
  EXPECT_EQ(server_->Stats().group_commits, 1u);
  EXPECT_EQ(server_->Stats().grouped_sets, 4u);
  EXPECT_TRUE(server_->Stop().ok());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

// With an output cap of one byte every reply pauses its connection until it is written:
// a pipeline of grouped SETs and GETs, sent while the client reads, still all runs, in
// order.
TEST_F(GroupCommitTest, TinyOutputCapStillServesAGroupedPipeline) {
  ServerOptions o = Gathering();
  o.max_output_bytes = 1;
  StartOn(NewMemory(), o);
  Client c(port());
  constexpr int kN = 5000;
  std::string batch;
  for (int i = 0; i < kN; ++i) {
    batch += Multibulk({"SET", "k" + std::to_string(i % 10), std::to_string(i)}) +
             Multibulk({"GET", "k" + std::to_string(i % 10)});
  }
  std::thread sender([&] { c.Send(batch); });
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    ASSERT_EQ(c.Reply(), Bulk(std::to_string(i))) << i;
  }
  sender.join();
  EXPECT_EQ(server_->Stats().output_buffer_closes, 0u);
}

// Stop finishes the grouped SETs waiting for a worker (the permit was taken), and the
// commands read behind them, before it closes their connections.
TEST_F(GroupCommitTest, StopFinishesGroupedSetsWaitingForAWorker) {
  StartOn(&recorder_, Gathering());
  auto a = Connect();
  auto b = Connect();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v").ok()); });
  ASSERT_TRUE(recorder_.WaitHeld(1));  // the only interactive permit is taken
  ASSERT_TRUE(a->Send(Multibulk({"SET", "a", "1"}) + Multibulk({"SET", "a2", "2"})));
  ASSERT_TRUE(b->Send(Multibulk({"SET", "b", "3"}) + Multibulk({"GET", "b"})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kInteractive) == 2; }));
  std::thread stopper([&] { EXPECT_TRUE(server_->Stop().ok()); });
  ASSERT_TRUE(WaitUntil([&] { return !Client(port()).connected(); }));  // no longer listening
  recorder_.Release();
  holder.join();
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(b->Reply(), "+OK\r\n");
  EXPECT_EQ(b->Reply(), Bulk("3"));
  EXPECT_TRUE(a->ClosedByServer());
  EXPECT_TRUE(b->ClosedByServer());
  stopper.join();
  EXPECT_TRUE(recorder_.Exists("a2").ok());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

// Without group commit each SET is made durable alone, as it is read: no PutMany.
TEST_F(GroupCommitTest, OffRunsEachSetAlone) {
  ServerOptions o = Gathering();
  o.group_commit = false;
  StartOn(&recorder_, o);
  auto x = Connect();
  auto a = Connect();
  auto b = Connect();
  HoldLoop(x.get());
  ASSERT_TRUE(a->Send(Multibulk({"SET", "a", "1"}) + Multibulk({"GET", "a"})));
  ASSERT_TRUE(b->Send(Multibulk({"SET", "b", "2"}) + Multibulk({"GET", "b"})));
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(a->Reply(), Bulk("1"));
  EXPECT_EQ(b->Reply(), "+OK\r\n");
  EXPECT_EQ(b->Reply(), Bulk("2"));
  EXPECT_TRUE(recorder_.Calls().empty());
  EXPECT_EQ(recorder_.puts(), 2u);
}

// A grouped SET that finds the interactive permit taken is queued for the workers; the
// loop serves other connections meanwhile, and each SET is answered, and the GET behind
// it run, once a worker ran it.
TEST_F(GroupCommitTest, GroupWithoutAFreePermitWaitsForTheWorkers) {
  StartOn(&recorder_, Gathering());
  auto a = Connect();
  auto b = Connect();
  std::thread holder([&] { ASSERT_TRUE(mw_->Put("holder", "v").ok()); });
  ASSERT_TRUE(recorder_.WaitHeld(1));  // the only interactive permit is taken
  ASSERT_TRUE(a->Send(Multibulk({"SET", "a", "1"}) + Multibulk({"GET", "a"})));
  ASSERT_TRUE(b->Send(Multibulk({"SET", "b", "2"}) + Multibulk({"GET", "b"})));
  ASSERT_TRUE(WaitUntil([&] { return mw_->QueueLength(RequestClass::kInteractive) == 2; }));
  Client other(port());
  EXPECT_EQ(other.Cmd({"PING"}), "+PONG\r\n");
  recorder_.Release();
  holder.join();
  EXPECT_EQ(a->Reply(), "+OK\r\n");
  EXPECT_EQ(a->Reply(), Bulk("1"));
  EXPECT_EQ(b->Reply(), "+OK\r\n");
  EXPECT_EQ(b->Reply(), Bulk("2"));
  EXPECT_TRUE(recorder_.Calls().empty());  // each went to a worker, one by one
  // Gathered, but not committed together: the counters say so.
  EXPECT_EQ(server_->Stats().group_commits, 0u);
  EXPECT_EQ(server_->Stats().grouped_sets, 0u);
}

// Clients that close (FIN, or reset) right after sending a SET, some with more behind
// it: the server neither crashes nor keeps their connections, and serves others.
TEST_F(GroupCommitTest, ClientClosingRightAfterASet) {
  StartOn(&recorder_, Gathering());
  auto x = Connect();
  std::vector<std::unique_ptr<Client>> leaving;
  for (int i = 0; i < 12; ++i) leaving.push_back(Connect());
  HoldLoop(x.get());
  for (int i = 0; i < 12; ++i) {
    Client& c = *leaving[i];
    std::string cmds = Multibulk({"SET", "gone" + std::to_string(i), "v"});
    if (i % 3 == 1) cmds += Multibulk({"SET", "more" + std::to_string(i), "v"}) + Multibulk({"GET", "gone"});
    if (i % 3 == 2) cmds += "*3\r\n$3\r\nSET\r\n";  // a command cut short
    ASSERT_TRUE(c.Send(cmds));
    if (i % 2 == 1) {
      linger l{1, 0};  // close with a reset
      ::setsockopt(c.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
  }
  leaving.clear();  // closes them all while the loop is held
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().connections_current == 1; }));
  EXPECT_EQ(x->Cmd({"SET", "after", "1"}), "+OK\r\n");
  EXPECT_EQ(x->Cmd({"GET", "after"}), Bulk("1"));
  Client y(port());
  EXPECT_EQ(y.Cmd({"SET", "y", "2"}), "+OK\r\n");
  EXPECT_TRUE(server_->Stop().ok());
  EXPECT_EQ(server_->Stats().connections_current, 0u);
}

// Group commit with the other ways of running requests: no control (the loop runs
// everything), hand-off (workers run everything) and run_on_loop off.
TEST_F(GroupCommitTest, OtherExecutionModes) {
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    MiddlewareOptions mo;
    ServerOptions o = Gathering();
    if (mode == 0) mo.control = false;
    if (mode == 1) mo.execution = Execution::kHandOff;
    if (mode == 2) o.run_on_loop = false;
    Engine* memory = NewMemory();
    StartOn(memory, o, mo);
    std::vector<std::thread> ts;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        Client c(port());
        std::string batch;
        for (int i = 0; i < 50; ++i) {
          const std::string k = "k" + std::to_string(t) + "-" + std::to_string(i);
          batch += Multibulk({"SET", k, k}) + Multibulk({"GET", k});
        }
        if (!c.Send(batch)) ++wrong;
        for (int i = 0; i < 50; ++i) {
          const std::string k = "k" + std::to_string(t) + "-" + std::to_string(i);
          if (c.Reply() != "+OK\r\n") ++wrong;
          if (c.Reply() != Bulk(k)) ++wrong;
        }
      });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(memory->Count(), 200u);
    EXPECT_TRUE(server_->Stop().ok());
    EXPECT_TRUE(mw_->Stop().ok());
    server_.reset();
    mw_.reset();
  }
}


// A connection pipelining SETs of every size with reads of them: the small SETs wait in
// groups, the large one goes to a worker (or moves to the batch loop), and the replies
// keep the order of the commands.
TEST_F(GroupCommitTest, PipelineMixingSmallAndLargeSets) {
  StartOn(NewMemory(), Gathering());
  Client c(port());
  const std::string big(200 * 1024, 'b');
  std::string batch;
  for (int i = 0; i < 5; ++i) {
    const std::string v = std::to_string(i);
    batch += Multibulk({"SET", "s", v}) + Multibulk({"SET", "big", big + v}) + Multibulk({"GET", "s"}) +
             Multibulk({"GET", "big"}) + Multibulk({"SET", "s", v + v}) + Multibulk({"GET", "s"});
  }
  ASSERT_TRUE(c.Send(batch));
  for (int i = 0; i < 5; ++i) {
    const std::string v = std::to_string(i);
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    ASSERT_EQ(c.Reply(), Bulk(v)) << i;
    ASSERT_EQ(c.Reply(), Bulk(big + v)) << i;
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    ASSERT_EQ(c.Reply(), Bulk(v + v)) << i;
  }
}

// The most a TCP socket's send buffer grows to by itself (net.ipv4.tcp_wmem's maximum;
// the server sets no SO_SNDBUF); 0 if unknown.
size_t MaxSendBuffer() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_wmem");
  size_t min = 0, def = 0, max = 0;
  return f >> min >> def >> max ? max : 0;
}

// After a grouped SET the connection's interest in the socket is restored: a reply
// behind it larger than the socket takes (written as the client reads) still arrives.
// The reply is written in pieces, each as the socket drains, for certain: the client's
// receive buffer is fixed small before it connects (autotuned, it may grow to
// net.ipv4.tcp_rmem's maximum, 32 MiB on some hosts, and with a large send buffer a
// 16 MiB reply then goes in one write), the value is larger than that buffer and the
// server's largest send buffer together, and the client reads nothing until the loop
// serving the connection has, after starting the reply, answered another connection:
// the write it had made was over, and had left part of the reply to write.
TEST_F(GroupCommitTest, ReplyLargerThanTheSocketAfterAGroupedSet) {
  ServerOptions o = Gathering();
  o.batch_io_threads = 1;  // c and other on one batch loop
  StartOn(NewMemory(), o);
  constexpr size_t kReceiveBuffer = 256 * 1024;
  Client c(port(), true, htonl(INADDR_LOOPBACK), static_cast<int>(kReceiveBuffer));
  const size_t send_max = MaxSendBuffer();
  ASSERT_GT(send_max, 0u) << "cannot read /proc/sys/net/ipv4/tcp_wmem";
  // 4 MiB more than the two sockets hold together (the kernel doubles SO_RCVBUF for its
  // bookkeeping; 16 MiB with net.ipv4.tcp_wmem's default maximum, 4 MiB).
  const std::string big(std::max<size_t>(16 << 20, send_max + 2 * kReceiveBuffer + (4 << 20)), 'g');
  ASSERT_EQ(c.Cmd({"SET", "big", big}), "+OK\r\n");  // moves c to the batch loop
  Client other(port());
  ASSERT_EQ(other.Cmd({"NVMW.CLASS", "batch"}), "+OK\r\n");  // and other to it
  ASSERT_TRUE(WaitUntil([&] { return server_->Stats().batch_moves == 2u; }));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send(Multibulk({"SET", "k", std::to_string(i)}) + Multibulk({"GET", "big"}) +
                       Multibulk({"GET", "k"})));
    ASSERT_TRUE(WaitUntil([&] { return c.Unread() > 5; })) << i;  // more than the SET's +OK: the reply began
    ASSERT_EQ(other.Cmd({"PING"}), "+PONG\r\n") << i;  // the loop is past the write that began it
    ASSERT_EQ(c.Reply(), "+OK\r\n") << i;
    const std::string reply = c.Reply();
    ASSERT_EQ(reply.size(), Bulk(big).size()) << i;  // a failure does not print megabytes of value
    ASSERT_TRUE(reply == Bulk(big)) << i;
    ASSERT_EQ(c.Reply(), Bulk(std::to_string(i))) << i;
  }
}


// The pmem engine behind a group: RecordingEngine's "block" key holds the loop, the rest
// goes to the pool, and each PutMany's items (key, value) are recorded in order.
class HeldPmem : public Engine {
 public:
  HeldPmem(Engine* pmem, RecordingEngine* holder) : pmem_(pmem), holder_(holder) {}
  Status Get(std::string_view key, const ValueFn& fn) override {
    return key == "block" ? holder_->Get(key, fn) : pmem_->Get(key, fn);
  }
  Status Put(std::string_view key, std::string_view value) override { return pmem_->Put(key, value); }
  void PutMany(const KeyValue* items, size_t n, Status* results) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<std::pair<std::string, std::string>> call;
      for (size_t i = 0; i < n; ++i) call.emplace_back(items[i].key, items[i].value);
      calls_.push_back(std::move(call));
    }
    pmem_->PutMany(items, n, results);
  }
  Status Remove(std::string_view key) override { return pmem_->Remove(key); }
  Status Exists(std::string_view key) override { return pmem_->Exists(key); }
  uint64_t Count() override { return pmem_->Count(); }
  const char* Name() const override { return pmem_->Name(); }
  std::vector<std::vector<std::pair<std::string, std::string>>> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  Engine* pmem_;
  RecordingEngine* holder_;
  std::mutex mu_;
  std::vector<std::vector<std::pair<std::string, std::string>>> calls_;
};

// A pool of 16 buckets on /dev/shm, removed after the test (or, if the test is killed,
// by the next one that makes such a directory).
class PmemGroupCommitTest : public GroupCommitTest {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    ASSERT_TRUE(Open().ok());
  }
  Status Open() {
    PmemOptions po;
    po.pool_size_bytes = 32 << 20;
    po.bucket_count = 16;  // a group of 20 keys has keys sharing a bucket
    po.max_value_bytes = 4096;
    po.huge_pages = false;
    return OpenPmemEngine(dir_ + "/pool", po, &pmem_);
  }
  ~PmemGroupCommitTest() override { pmem_.reset(); }

  test::TempDir tmp_{"/dev/shm", "nvmw-server-test-"};
  std::string dir_;
  std::unique_ptr<Engine> pmem_;
  std::unique_ptr<HeldPmem> held_;  // outlives the server (TearDown stops it)
};

// Twenty connections' SETs read in one turn, on the pmem engine: PutMany calls of up to
// eight items with keys given twice and keys sharing a bucket (the engine splits them);
// a value over the engine's max_value_bytes (under the middleware's and the server's
// caps) is an error for its connection only; a key given twice ends with the value
// later in the group, and every value is there after the pool is reopened.
TEST_F(PmemGroupCommitTest, GroupOfAnySizeOnThePool) {
  ASSERT_NE(pmem_, nullptr);
  held_ = std::make_unique<HeldPmem>(pmem_.get(), &recorder_);
  HeldPmem& held = *held_;
  StartOn(&held, Gathering());
  auto x = Connect();
  constexpr int kClients = 20;
  constexpr int kKeys = 12;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Connect());
  HoldLoop(x.get());
  auto value = [](int i) { return i == 5 ? std::string(5000, 'x') : "v" + std::to_string(i); };
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(clients[i]->Send(Multibulk({"SET", "key" + std::to_string(i % kKeys), value(i)})));
  }
  recorder_.Release();
  EXPECT_EQ(x->Reply(), "$-1\r\n");
  for (int i = 0; i < kClients; ++i) {
    const std::string reply = clients[i]->Reply();
    if (i == 5) {
      EXPECT_EQ(reply.rfind("-ERR invalid argument: value of 5000 bytes", 0), 0u) << reply;
    } else {
      EXPECT_EQ(reply, "+OK\r\n") << i;
    }
  }
  // Committed in groups (a gathered group runs once it has 8), one after the other.
  const auto calls = held.Calls();
  ASSERT_GE(calls.size(), 1u);
  size_t items = 0;
  size_t largest = 0;
  std::map<std::string, std::string> want;  // the order of the groups and in them decides
  for (const auto& call : calls) {
    items += call.size();
    largest = std::max(largest, call.size());
    for (const auto& [k, v] : call) {
      if (v.size() <= 4096) want[k] = v;
    }
  }
  EXPECT_EQ(items, static_cast<size_t>(kClients));
  EXPECT_GE(largest, 8u);
  ASSERT_EQ(want.size(), static_cast<size_t>(kKeys));
  for (const auto& [k, v] : want) EXPECT_EQ(x->Cmd({"GET", k}), Bulk(v)) << k;
  EXPECT_EQ(pmem_->Count(), static_cast<uint64_t>(kKeys));
  EXPECT_TRUE(server_->Stop().ok());
  EXPECT_TRUE(mw_->Stop().ok());
  server_.reset();
  mw_.reset();
  pmem_.reset();
  ASSERT_TRUE(Open().ok());
  for (const auto& [k, v] : want) {
    std::string got;
    EXPECT_TRUE(pmem_->Get(k, &got).ok()) << k;
    EXPECT_EQ(got, v) << k;
  }
  EXPECT_EQ(pmem_->Count(), static_cast<uint64_t>(kKeys));
}

}  // namespace
}  // namespace nvmw
