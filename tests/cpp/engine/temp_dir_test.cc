// The temporary pool directories of the engine tests: a test killed with SIGKILL
// leaves its directory on /dev/shm (RAM), and the next one made removes it; a
// directory whose lock a live process holds is never removed, also when several
// processes remove stale directories at once.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine_test_util.h"

namespace nvmw {
namespace {

using test::ReadFile;
using test::TempDir;
using test::WriteFile;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Reads one line (a path) a child wrote to `fd`; empty at end of file.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

// A child that makes a TempDir under `base` with a file in it, writes its path to
// `out`, and then waits until the pipe `hold` reaches end of file (its parent closes
// hold[1] or dies); it exits 0 when its directory was intact until then. Killed
// before, it leaves the directory as a killed test does.
pid_t StartHolder(const std::string& base, int out, const int hold[2]) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(60);
  close(hold[1]);
  int code = 1;
  {
    TempDir d(base);
    if (!d.path().empty()) {
      WriteFile(d.File("pool"), std::string(4096, 'p'));
      const std::string s = d.path() + "\n";
      if (write(out, s.data(), s.size()) == static_cast<ssize_t>(s.size())) {
        char c;
        while (read(hold[0], &c, 1) > 0) {}
        code = ReadFile(d.File("pool")) == std::string(4096, 'p') ? 0 : 2;
      }
    }
  }
  _exit(code);
}

TEST(TempDirTest, TheLockIsHeldForTheDirectorysLifeAndTheDirectoryGoesWithIt) {
  std::string path;
  {
    TempDir d;
    ASSERT_FALSE(d.path().empty());
    path = d.path();
    const int fd = open(d.File(test::kTempDirOwner).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << d.File(test::kTempDirOwner) << ": " << std::strerror(errno);
    EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0);  // another open file: the lock is taken
    EXPECT_EQ(errno, EWOULDBLOCK);
    close(fd);
    test::RemoveStaleTempDirs("/dev/shm");
    EXPECT_TRUE(Exists(path)) << "removed while its lock was held";
  }
  EXPECT_FALSE(Exists(path));
}

TEST(TempDirTest, ANewDirectoryRemovesThoseOfKilledTestsAndNoLiveOne) {
  int paths[2], hold[2];
  ASSERT_EQ(pipe(paths), 0);
  ASSERT_EQ(pipe(hold), 0);
  // A test killed with SIGKILL while its directory holds a pool.
  const pid_t killed = StartHolder("/dev/shm", paths[1], hold);
  ASSERT_GT(killed, 0);
  const std::string stale = ReadLine(paths[0]);
  ASSERT_FALSE(stale.empty());
  ASSERT_EQ(kill(killed, SIGKILL), 0);
  int ws = 0;
  ASSERT_EQ(waitpid(killed, &ws, 0), killed);
  ASSERT_TRUE(WIFSIGNALED(ws));
  ASSERT_TRUE(Exists(stale + "/pool"));
  // A test running in another process, and a directory of this one.
  const pid_t live = StartHolder("/dev/shm", paths[1], hold);
  ASSERT_GT(live, 0);
  close(hold[0]);
  const std::string other = ReadLine(paths[0]);
  ASSERT_FALSE(other.empty());
  TempDir mine;
  ASSERT_FALSE(mine.path().empty());
  // An nvmw- directory without the lock file: another tool's, or one being made.
  char foreign[] = "/dev/shm/nvmw-engine-test-XXXXXX";
  ASSERT_NE(mkdtemp(foreign), nullptr);

  TempDir next;
  ASSERT_FALSE(next.path().empty());
  EXPECT_FALSE(Exists(stale)) << stale << " of a killed test was left behind";
  EXPECT_TRUE(Exists(other + "/pool"));
  EXPECT_TRUE(Exists(mine.path()));
  EXPECT_TRUE(Exists(foreign));
  rmdir(foreign);
  if (Exists(stale)) {
    std::error_code ec;
    std::filesystem::remove_all(stale, ec);
  }
  close(hold[1]);
  ASSERT_EQ(waitpid(live, &ws, 0), live);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "status " << ws;
  EXPECT_FALSE(Exists(other));  // removed by its own process
  close(paths[0]);
  close(paths[1]);
}

// Several processes start at once, each removing stale directories and making its
// own: every stale directory goes, each is counted by one remover, and no process
// loses its directory to another's removal.
TEST(TempDirTest, ConcurrentRemoversTakeEachStaleDirectoryOnceAndNoLiveOne) {
  constexpr int kStale = 40;
  constexpr int kProcs = 4;
  TempDir base;
  ASSERT_FALSE(base.path().empty());
  std::vector<std::string> stale;
  for (int i = 0; i < kStale; ++i) {
    // As a killed test leaves it: the lock file, unlocked, and a pool.
    std::string d = base.File("nvmw-stale-XXXXXX");
    ASSERT_NE(mkdtemp(d.data()), nullptr);
    WriteFile(d + "/" + test::kTempDirOwner, "");
    WriteFile(d + "/pool", std::string(4096, 's'));
    stale.push_back(d);
  }
  int start[2], report[2], hold[2];
  ASSERT_EQ(pipe(start), 0);
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(hold), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(60);
      close(start[1]);
      close(hold[1]);
      char c;
      while (read(start[0], &c, 1) > 0) {}
      int removed = test::RemoveStaleTempDirs(base.path());
      int code = 1;
      {
        TempDir d(base.path(), "nvmw-live-");
        if (!d.path().empty()) {
          WriteFile(d.File("pool"), "live");
          removed += test::RemoveStaleTempDirs(base.path());
          const std::string s = d.path() + " " + std::to_string(removed) + "\n";
          if (write(report[1], s.data(), s.size()) == static_cast<ssize_t>(s.size())) {
            while (read(hold[0], &c, 1) > 0) {}
            code = ReadFile(d.File("pool")) == "live" ? 0 : 2;
          }
        }
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  close(start[0]);
  close(start[1]);  // all start at once
  close(report[1]);
  close(hold[0]);
  int counted = 0;
  std::vector<std::string> live;
  for (int p = 0; p < kProcs; ++p) {
    const std::string line = ReadLine(report[0]);
    ASSERT_NE(line.find(' '), std::string::npos) << "child " << p << " reported nothing";
    live.push_back(line.substr(0, line.find(' ')));
    counted += std::stoi(line.substr(line.find(' ') + 1));
  }
  // Each child reported after its last removal: all removals are over.
  for (const auto& d : stale) EXPECT_FALSE(Exists(d)) << d;
  for (const auto& d : live) EXPECT_TRUE(Exists(d + "/pool")) << d;
  EXPECT_LE(counted, kStale);  // the constructors' removals are not counted
  close(hold[1]);
  for (pid_t pid : pids) {
    int ws = 0;
    ASSERT_EQ(waitpid(pid, &ws, 0), pid);
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "status " << ws;
  }
  close(report[0]);
}

}  // namespace
}  // namespace nvmw
