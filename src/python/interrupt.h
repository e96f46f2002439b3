// Blocking binding calls that Ctrl-C can interrupt.
//
// A binding call that blocks with the GIL released keeps the main thread away from
// the interpreter: CPython's SIGINT handler only sets a flag, and the Python-level
// handler (KeyboardInterrupt) runs when the main thread next executes bytecode. So a
// long call waits in short slices instead, and between slices takes the GIL and runs
// the pending signal handlers (PyErr_CheckSignals). When one raises, the call asks
// the work to stop, waits until it has (so nothing it references goes away), and
// raises that exception. Off the main thread signals are never pending, and the wait
// is an ordinary one in slices.
#ifndef NVMW_PYTHON_INTERRUPT_H_
#define NVMW_PYTHON_INTERRUPT_H_

#include <functional>

#include "nvmw/status.h"
#include "python/bind.h"

namespace nvmw::py {

// Calls wait_slice() with the GIL released (inside a CallWithoutGil) until it returns
// true; wait_slice should block for at most a few tens of milliseconds. Between
// slices, pending signal handlers run with the GIL held; if one raises, stop() is
// called (GIL released, once per slice, so that a stop racing with a restart of the
// work still lands) until wait_slice() returns true, and then the handler's
// exception is raised (nb::python_error). With an empty stop (a wait that holds
// nothing: nothing to stop), the exception is raised at once.
void WaitInterruptibly(const std::function<bool()>& wait_slice, const std::function<void()>& stop);

// Runs fn() on a helper thread and waits for it as WaitInterruptibly does (stop()
// must make fn return soon). Returns fn's status; an exception fn throws (such as
// std::bad_alloc) is rethrown here, on the calling thread. If no helper thread can be
// started, fn runs on the calling thread with the GIL released (not interruptible).
Status RunInterruptibly(const std::function<Status()>& fn, const std::function<void()>& stop);

// Sleeps for up to `ms` milliseconds while done() is false, checking it every
// 5 ms; returns done(). For wait_slice functions that poll a flag.
bool PollFor(const std::function<bool()>& done, int ms = 20);

}  // namespace nvmw::py

#endif  // NVMW_PYTHON_INTERRUPT_H_
