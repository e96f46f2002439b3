// Helpers shared by the C++ test suites of several roles.
#ifndef NVMW_TESTS_TEST_UTIL_H_
#define NVMW_TESTS_TEST_UTIL_H_

#include <chrono>
#include <functional>
#include <thread>

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

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_TEST_UTIL_H_
