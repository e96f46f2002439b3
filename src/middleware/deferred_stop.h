// Deferred stops: work that a destructor cannot do on the thread that runs it, because
// that thread is inside a completion of the middleware the work waits for. Freeing a
// Middleware inside one of its own completions, or a YcsbGenerator or Replay inside a
// completion of the middleware it drives, hands the stop, the joins and the free to a
// detached thread of their own; WaitForDeferredStops (nvmw/middleware.h) waits for
// every such thread.
#ifndef NVMW_MIDDLEWARE_DEFERRED_STOP_H_
#define NVMW_MIDDLEWARE_DEFERRED_STOP_H_

#include <functional>

namespace nvmw {

// Runs fn on a detached thread that WaitForDeferredStops waits for; the thread drops
// fn (and what it holds) before it counts as finished. Returns false, with fn dropped
// unrun, when the operating system refuses a thread: fn must then hold nothing whose
// destruction waits (the caller leaks what it meant to free, and says so).
bool RunDeferredStop(std::function<void()> fn);

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_DEFERRED_STOP_H_
