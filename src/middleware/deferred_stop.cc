// Deferred stops (deferred_stop.h) and WaitForDeferredStops.
#include "middleware/deferred_stop.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <pthread.h>

#include "middleware/middleware_impl.h"
#include "nvmw/middleware.h"

namespace nvmw {

namespace {

struct DeferredStops {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;  // guarded by mu
};

// Never freed: a deferred thread may still finish while the process exits.
DeferredStops& Deferred() {
  static auto* state = new DeferredStops;
  return *state;
}

void Finished() {
  DeferredStops& st = Deferred();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    --st.pending;
  }
  st.cv.notify_all();
}

}  // namespace

bool RunDeferredStop(std::function<void()> fn) {
  DeferredStops& st = Deferred();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    ++st.pending;
  }
  try {
    std::thread([fn = std::move(fn)]() mutable {
      (void)::pthread_setname_np(::pthread_self(), "nvmw-stop");
      fn();
      fn = nullptr;  // what it holds goes before the thread counts as finished
      Finished();
    }).detach();
  } catch (const std::system_error&) {
    Finished();
    return false;
  }
  return true;
}

Status WaitForDeferredStops(double timeout_s) {
  if (!(timeout_s >= 0)) return Status::InvalidArgument("timeout_s must be >= 0");
  if (ThreadInAnyCompletion()) {
    return Status::NotSupported(
        "WaitForDeferredStops: called from inside a completion, which a deferred stop may "
        "be waiting for");
  }
  DeferredStops& st = Deferred();
  std::unique_lock<std::mutex> lock(st.mu);
  // Capped so that a huge timeout cannot overflow the clock arithmetic.
  if (st.cv.wait_for(lock, std::chrono::duration<double>(std::min(timeout_s, 1e7)),
                     [&st] { return st.pending == 0; })) {
    return Status::OK();
  }
  return Status::IOError("timeout: " + std::to_string(st.pending) +
                         " deferred stop(s) still running");
}

}  // namespace nvmw
