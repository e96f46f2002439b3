// Helpers shared by the C++ test suites of several roles.
#ifndef NVMW_TESTS_TEST_UTIL_H_
#define NVMW_TESTS_TEST_UTIL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "nvmw/middleware.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

// For a body run by InChild: a failed check says which and makes the child exit with a
// code naming the line.
#define CHILD_CHECK(cond)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "child: line %d: %s failed\n", __LINE__, #cond); \
      return 10 + __LINE__ % 200;                                           \
    }                                                                       \
  } while (0)

namespace nvmw::testing {

// Polls `pred` every `poll` until it holds (true) or 20 s pass (false; a generous
// bound for sanitizer builds).
inline bool WaitUntil(const std::function<bool()>& pred,
                      std::chrono::microseconds poll = std::chrono::microseconds(200)) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

// Runs body in a forked child under an alarm of `alarm_s` seconds (a hang ends as
// 128 + SIGALRM = 142); returns its exit code, or 128 + the signal that ended it.
inline int InChild(const std::function<int()>& body, unsigned alarm_s = 60) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(alarm_s);
    const int code = body();
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Under AddressSanitizer: whether nothing has leaked so far (LeakSanitizer's check,
// recoverable). Elsewhere true.
inline bool NoLeaks() {
#if defined(__SANITIZE_ADDRESS__)
  return __lsan_do_recoverable_leak_check() == 0;
#else
  return true;
#endif
}

// The three ways a middleware runs requests, for behaviour that must hold in each.
enum class Mode { kCallerRuns, kHandOff, kNoControl };

inline const char* ModeName(Mode m) {
  return m == Mode::kCallerRuns ? "caller-runs" : m == Mode::kHandOff ? "hand-off" : "no-control";
}

// Options of mode m with one interactive permit (one worker with hand-off, one shared
// permit without control): while a completion runs, it holds the only one.
inline MiddlewareOptions OnePermitOptions(Mode m) {
  MiddlewareOptions o;
  o.max_threads = 4;
  o.window_s = 60;
  o.control = m != Mode::kNoControl;
  o.execution = m == Mode::kHandOff ? Execution::kHandOff : Execution::kCallerRuns;
  o.no_control_max_inflight = 1;
  return o;
}

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_TEST_UTIL_H_
