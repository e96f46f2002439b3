// Crash-consistency harness for the pmem engine: a child (crash_writer_tool)
// writes self-describing values and reports every operation it starts and every
// acknowledgement through a pipe; the parent SIGKILLs it at a random moment,
// reopens the pool and checks that every acknowledged write reads back exactly
// (or was superseded by the one operation in flight after it), that no value is
// torn, and that Count() matches. Repeated for many kill cycles on one pool.
//
// The second test does the same with PutMany and also checks that each group of a
// call the kill interrupted is there whole or not at all, and that groups land in
// order.
//
// Environment: NVMW_CRASH_CYCLES (default 200 kills for Put, about 9 s, and 120 for
// PutMany, whose cycles take longer), NVMW_CRASH_SEED (default 1).
// A heap bug fixed in the engine (PmemEngine::WarmAllocator) failed one run of 100
// kills in ten; many seeds of NVMW_CRASH_CYCLES=100 are the way to look for such bugs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crash_protocol.h"
#include "engine/engine_util.h"
#include "engine_test_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using test::CrashEvent;
using test::CrashRecord;

struct Version {
  uint64_t version;
  uint64_t length;
  bool operator==(const Version&) const = default;
};
// What a key should hold: nullopt = absent.
using KeyState = std::optional<Version>;

struct KeyModel {
  KeyState acked;                  // state after the last acknowledged operation
  bool in_flight = false;          // an operation began and was not acknowledged
  KeyState in_flight_state;        // the state it would leave
};

std::string Describe(const KeyState& s) {
  if (!s) return "absent";
  return "v" + std::to_string(s->version) + "/" + std::to_string(s->length) + "B";
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string ToolPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / "crash_writer_tool").string();
}

// Reads one record; false at EOF.
bool ReadRecord(int fd, CrashRecord* r) {
  char* p = reinterpret_cast<char*>(r);
  size_t got = 0;
  while (got < sizeof(*r)) {
    ssize_t n = read(fd, p + got, sizeof(*r) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// One PutMany call of the writer: its keys and their versions, in call order.
struct Batch {
  std::vector<uint32_t> keys;
  std::vector<uint64_t> versions;
};

// How PmemEngine::PutMany splits `keys` into groups (include/nvmw/engine.h): runs of
// consecutive items, at most kPutGroupMax, in distinct buckets. Returns each item's
// group number.
std::vector<size_t> Groups(const std::vector<uint32_t>& keys) {
  std::vector<size_t> group(keys.size());
  std::vector<uint64_t> buckets;
  size_t g = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t b =
        engine_internal::HashKey(test::CrashKey(keys[i])) & (test::kCrashBuckets - 1);
    bool seen = false;
    for (uint64_t other : buckets) seen = seen || other == b;
    if (seen || buckets.size() == kPutGroupMax) {
      ++g;
      buckets.clear();
    }
    buckets.push_back(b);
    group[i] = g;
  }
  return group;
}

class CrashTest : public ::testing::Test {
 protected:
  void Apply(const CrashRecord& r) {
    if (r.event == CrashEvent::kBeginPutMany) {
      ASSERT_EQ(batch_left_, 0u) << "a PutMany announced inside another";
      ASSERT_GT(r.key, 0u);
      ASSERT_LE(r.key, test::kCrashMaxBatch);
      batches_.emplace_back();
      batch_left_ = r.key;
      return;
    }
    ASSERT_LT(r.key, test::kCrashKeys);
    KeyModel& m = model_[r.key];
    switch (r.event) {
      case CrashEvent::kBeginPut:
        ASSERT_FALSE(m.in_flight) << "two operations in flight on key " << r.key;
        m.in_flight = true;
        m.in_flight_state = Version{r.version, r.length};
        if (batch_left_ > 0) {  // sent in one write with its kBeginPutMany: no other record between
          batches_.back().keys.push_back(r.key);
          batches_.back().versions.push_back(r.version);
          --batch_left_;
        }
        break;
      case CrashEvent::kBeginRemove:
        ASSERT_FALSE(m.in_flight) << "two operations in flight on key " << r.key;
        m.in_flight = true;
        m.in_flight_state = std::nullopt;
        break;
      case CrashEvent::kAck:
        ASSERT_TRUE(m.in_flight) << "ack without a start on key " << r.key;
        m.acked = m.in_flight_state;
        m.in_flight = false;
        ++acks_;
        break;
      default:
        FAIL() << "unexpected record " << static_cast<uint32_t>(r.event);
    }
    ASSERT_TRUE(batch_left_ == 0 || r.event == CrashEvent::kBeginPut)
        << "a PutMany's items were not announced together";
  }

  // For each PutMany the kill interrupted (its items still in flight): every group
  // holds all of its new values or none, and a group holds them only if every group
  // before it does (groups are published one after another).
  void CheckInterruptedBatches(int cycle, const std::vector<KeyModel>& before,
                               const std::vector<KeyState>& observed) {
    for (const Batch& batch : batches_) {
      bool interrupted = true;
      for (size_t i = 0; i < batch.keys.size(); ++i) {
        const KeyModel& m = before[batch.keys[i]];
        interrupted = interrupted && m.in_flight && m.in_flight_state &&
                      m.in_flight_state->version == batch.versions[i];
      }
      if (!interrupted) continue;
      const std::vector<size_t> group = Groups(batch.keys);
      const size_t ngroups = group.back() + 1;
      std::vector<int> landed(ngroups, 0), size(ngroups, 0);
      for (size_t i = 0; i < batch.keys.size(); ++i) {
        ++size[group[i]];
        const KeyState& now = observed[batch.keys[i]];
        if (now && now->version == batch.versions[i]) ++landed[group[i]];
      }
      std::string layout;
      for (size_t g = 0; g < ngroups; ++g) {
        layout += " " + std::to_string(landed[g]) + "/" + std::to_string(size[g]);
      }
      ++batches_interrupted_;
      bool seen_missing = false;
      for (size_t g = 0; g < ngroups; ++g) {
        ASSERT_TRUE(landed[g] == 0 || landed[g] == size[g])
            << "cycle " << cycle << ": group " << g << " of an interrupted PutMany is partly "
            << "there (items landed per group:" << layout << ")";
        ASSERT_FALSE(seen_missing && landed[g] > 0)
            << "cycle " << cycle << ": group " << g << " landed after an earlier group did not"
            << " (items landed per group:" << layout << ")";
        seen_missing = seen_missing || landed[g] == 0;
      }
      if (landed[0] > 0 && seen_missing) ++batches_split_;
    }
    batches_.clear();
  }

  // Reopens the pool and checks every key against the model, then makes the
  // observed state the acknowledged one for the next cycle.
  void Verify(int cycle) {
    const std::vector<KeyModel> before = model_;
    std::vector<KeyState> observed(test::kCrashKeys);
    std::unique_ptr<Engine> engine;
    PmemOptions o;
    o.create_if_missing = false;
    Status s = OpenPmemEngine(pool_, o, &engine);
    ASSERT_TRUE(s.ok()) << "cycle " << cycle << ": reopen after kill: " << s.ToString();
    uint64_t present = 0;
    for (uint32_t i = 0; i < test::kCrashKeys; ++i) {
      const std::string k = test::CrashKey(i);
      KeyModel& m = model_[i];
      KeyState actual;
      bool intact = true;
      Status g = engine->Get(k, [&](std::string_view v) {
        uint64_t version = 0;
        intact = test::CheckValue(k, v, &version);
        actual = Version{version, v.size()};
      });
      ASSERT_TRUE(g.ok() || g.IsNotFound()) << g.ToString();
      ASSERT_TRUE(intact) << "cycle " << cycle << ": torn value for " << k;
      bool ok = actual == m.acked || (m.in_flight && actual == m.in_flight_state);
      ASSERT_TRUE(ok) << "cycle " << cycle << ": " << k << " holds " << Describe(actual)
                      << ", acknowledged " << Describe(m.acked) << ", in flight "
                      << (m.in_flight ? Describe(m.in_flight_state) : "none");
      if (m.in_flight) {
        ++kills_in_flight_;
        if (actual == m.in_flight_state && !(actual == m.acked)) ++in_flight_committed_;
      }
      m.acked = actual;
      m.in_flight = false;
      observed[i] = actual;
      if (actual) ++present;
    }
    EXPECT_EQ(engine->Count(), present) << "cycle " << cycle;
    CheckInterruptedBatches(cycle, before, observed);
  }

  // Runs the kill cycles (NVMW_CRASH_CYCLES, else `default_cycles`) with the writer
  // in `mode` ("put" or "many").
  void RunCycles(const char* mode, int default_cycles);

  test::TempDir dir_;
  std::string pool_;
  std::vector<KeyModel> model_ = std::vector<KeyModel>(test::kCrashKeys);
  uint64_t acks_ = 0;
  uint64_t kills_in_flight_ = 0;
  uint64_t in_flight_committed_ = 0;
  std::vector<Batch> batches_;   // PutMany calls announced since the last Verify
  uint32_t batch_left_ = 0;      // items of the last one still to come
  uint64_t batches_interrupted_ = 0;
  uint64_t batches_split_ = 0;   // interrupted between two of its groups
};

void CrashTest::RunCycles(const char* mode, int default_cycles) {
  ASSERT_FALSE(dir_.path().empty());
  pool_ = dir_.File("crash.pool");
  const std::string tool = ToolPath();
  ASSERT_EQ(access(tool.c_str(), X_OK), 0)
      << tool << " is missing: build the crash_writer_tool target";
  const int cycles = static_cast<int>(EnvOr("NVMW_CRASH_CYCLES", default_cycles));
  const uint64_t seed = EnvOr("NVMW_CRASH_SEED", 1);
  std::mt19937_64 rng(seed);
  std::printf("crash test (%s): %d cycles, seed %llu, pool %s\n", mode, cycles,
              static_cast<unsigned long long>(seed), pool_.c_str());

  uint64_t next_version = 1;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const std::string first = std::to_string(next_version);
    const std::string child_seed = std::to_string(rng());
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(fds[1], 3);  // dup2 clears close-on-exec on the copy
      execl(tool.c_str(), tool.c_str(), pool_.c_str(), first.c_str(), child_seed.c_str(), "3",
            mode, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);

    // Let the child run until it has acknowledged a random number of
    // operations (0 = kill it right after open), then a little longer.
    const uint64_t acks_before_kill = rng() % 40;
    const auto extra = std::chrono::microseconds(rng() % 3000);
    CrashRecord r;
    bool ready = false;
    uint64_t acks = 0;
    while (acks < acks_before_kill || !ready) {
      if (!ReadRecord(fds[0], &r)) break;
      if (r.event == CrashEvent::kReady) {
        ready = true;
        continue;
      }
      Apply(r);
      if (r.event == CrashEvent::kAck) ++acks;
    }
    std::this_thread::sleep_for(extra);
    kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    // Everything the child wrote before it died is still in the pipe.
    while (ReadRecord(fds[0], &r)) {
      if (r.event == CrashEvent::kReady) {
        ready = true;
        continue;
      }
      Apply(r);
    }
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "cycle " << cycle << ": the writer exited by itself (status " << wstatus
        << "); see its message above";
    ASSERT_TRUE(ready) << "cycle " << cycle << ": the writer never opened the pool";
    if (HasFatalFailure()) return;

    Verify(cycle);
    if (HasFatalFailure()) return;
    // The child numbers versions first + n*2 + thread; leave room for all of them.
    next_version += 1000000;
  }
  std::printf("crash test: %llu acknowledged operations; %llu kills with an operation in "
              "flight, %llu of those committed\n",
              static_cast<unsigned long long>(acks_),
              static_cast<unsigned long long>(kills_in_flight_),
              static_cast<unsigned long long>(in_flight_committed_));
  // The harness must actually kill mid-operation, or it proves nothing.
  EXPECT_GT(kills_in_flight_, 0u);
  EXPECT_GT(acks_, 0u);
}

TEST_F(CrashTest, KilledWriterLosesNoAcknowledgedWriteAndTearsNoValue) { RunCycles("put", 200); }

TEST_F(CrashTest, KilledPutManyLosesNoAcknowledgedItemAndLeavesGroupsWhole) {
  RunCycles("many", 120);
  if (HasFatalFailure()) return;
  std::printf("crash test (many): %llu PutMany calls interrupted, %llu of them between two "
              "groups\n",
              static_cast<unsigned long long>(batches_interrupted_),
              static_cast<unsigned long long>(batches_split_));
  EXPECT_GT(batches_interrupted_, 0u);
}

}  // namespace
}  // namespace nvmw
