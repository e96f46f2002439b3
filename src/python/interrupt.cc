// Blocking binding calls that Ctrl-C can interrupt (see interrupt.h).
#include "python/interrupt.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace nvmw::py {

void WaitInterruptibly(const std::function<bool()>& wait_slice, const std::function<void()>& stop) {
  while (true) {
    bool done;
    {
      CallWithoutGil release;
      done = wait_slice();
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) {
      nb::python_error error;  // the handler's exception (KeyboardInterrupt for Ctrl-C)
      if (stop) {
        CallWithoutGil release;
        do {
          stop();
        } while (!wait_slice());
      }
      throw error;
    }
  }
}

Status RunInterruptibly(const std::function<Status()>& fn, const std::function<void()>& stop) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::exception_ptr error;  // what fn threw (std::bad_alloc...), rethrown by the caller
  };
  auto state = std::make_shared<State>();
  std::thread helper;
  try {
    helper = std::thread([state, &fn] {
      Status s;
      std::exception_ptr error;
      try {
        s = fn();
      } catch (...) {
        error = std::current_exception();  // escaping a thread would terminate the process
      }
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->status = std::move(s);
        state->error = error;
        state->done = true;
      }
      state->cv.notify_all();
    });
  } catch (const std::system_error&) {
    CallWithoutGil release;  // no helper: run here, not interruptible
    return fn();
  }
  try {
    WaitInterruptibly(
        [&] {
          std::unique_lock<std::mutex> lock(state->mu);
          return state->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return state->done; });
        },
        stop);
  } catch (...) {
    helper.join();  // done already: WaitInterruptibly returns only once fn has
    throw;
  }
  helper.join();
  if (state->error) std::rethrow_exception(state->error);  // as if fn had run here
  return state->status;
}

bool PollFor(const std::function<bool()>& done, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // 200 wake-ups a second at most
  }
  return true;
}

}  // namespace nvmw::py
