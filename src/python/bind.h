// Declarations shared by the binding files of nvmw._core.
#ifndef NVMW_PYTHON_BIND_H_
#define NVMW_PYTHON_BIND_H_

#include <nanobind/nanobind.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/status.h"

namespace nvmw::py {

namespace nb = nanobind;

// Raises the Python exception that matches status (nvmw.errors) unless it is OK.
// NotFound raises nvmw.errors.NotFoundError; callers that map it to None check first.
void ThrowIfError(const Status& status);

// The number of fork()s between the module's import and this process (0 in the
// process that imported it; a pthread_atfork handler counts up in each child). Engines
// and middlewares record the one they were opened in: in a child, the threads they run
// on (workers, monitor, a device's timer) do not exist, and a pool file is mapped
// shared with the parent, which goes on using it.
uint64_t ForkGeneration();

// Raises NotSupportedError (`what` prefixes the message; `object` names it: "engine",
// "middleware"...) unless `generation` is this process's: the object was created
// before a fork(), in the parent process.
void RefuseAfterFork(uint64_t generation, const char* what, const char* object);

// Python-visible engine (`_core.Engine`): owns an Engine and keeps alive the engine
// it wraps, if any (an emulated device wraps a pmem or memory engine). Freed in a
// child of the process that opened it, the engine is left alone (leaked): closing it
// would join threads that do not exist there and touch the parent's pool.
struct PyEngine {
  ~PyEngine() {
    if (fork_generation != ForkGeneration()) (void)engine.release();
  }
  std::unique_ptr<Engine> engine;
  std::shared_ptr<PyEngine> base;
  uint64_t fork_generation = ForkGeneration();
};

// Python-visible middleware (`_core.Middleware`). The C++ Middleware and the engine
// it runs on live in one shared box: `mw` aliases it, so every holder of a
// std::shared_ptr<Middleware> (this object, a YcsbGenerator, a Replay, a binding call
// in progress with the GIL released) keeps both alive. close() only drops this
// object's reference after stopping; the box is freed with its last holder, and its
// destructor stops the middleware with the GIL released (completions need the GIL).
// `mw` and `engine` are only read or written with the GIL held.
struct PyMiddleware {
  std::shared_ptr<PyEngine> engine;   // null after close
  std::shared_ptr<Middleware> mw;     // null after close
  std::weak_ptr<Middleware> closing;  // a second close() waits for the first one's Stop
  uint64_t fork_generation = 0;       // ForkGeneration() when it was opened
};

// The GIL-free section of a binding call into a middleware, a generator or a replay
// (use instead of nb::gil_scoped_release there). The exit hook waits, with the GIL
// released, until no thread is inside one, so that every such thread has taken the
// GIL back before the interpreter starts finalizing: a daemon thread that asks for it
// later is terminated by CPython, which aborts the process under C++ frames.
class CallWithoutGil {
 public:
  CallWithoutGil();
  ~CallWithoutGil();
  CallWithoutGil(const CallWithoutGil&) = delete;
  CallWithoutGil& operator=(const CallWithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

// True when this thread holds the GIL and Python is not finalizing: then a blocking
// wait that may depend on a completion (which takes the GIL) must release it first.
bool ShouldReleaseGil();

// The middleware of h, shared, for use across a GIL release; raises
// nvmw.errors.ShutdownError (`what` prefixes the message) once h is closed or stopped,
// and NotSupportedError in a child process forked after h was opened.
std::shared_ptr<Middleware> AcquireMiddleware(PyMiddleware& h, const char* what);

// Raises NotSupportedError (`what` prefixes the message) when this thread is running a
// completion callback of mw: a call of a generator or a replay driving mw that waits
// for its client threads could wait for the permit that this very thread holds.
void RefuseInsideCompletion(const Middleware& mw, const char* what);

// Raises InvalidArgumentError naming `what` when path holds a NUL character: the
// operating system would see only the part before it, a different file.
void CheckPath(const char* what, const std::string& path);

// A file path argument as the operating system's bytes: bytes as they are, a str or
// os.PathLike encoded as os.fsencode does (so a name that is not UTF-8, which
// os.fsdecode gives as lone surrogates, names the same file). TypeError naming `what`
// for other types; CheckPath's error for a NUL character.
std::string FsPath(const char* what, nb::handle path);

// Options passed as dicts (YCSB, traces, replay, simulator). `what` names the option
// in messages ("ycsb: threads"). OptionName: a key, TypeError unless a str.
// OptionAs<T>: the value as T, TypeError naming the option for a value of another type.
// OptionUint: a non-negative integer, exactly (an int up to 2^64-1, or a float with an
// integral value); InvalidArgumentError for a negative, fractional or larger one.
std::string OptionName(const char* what, nb::handle key);
const char* OptionKind(const std::type_info& type);
template <typename T>
T OptionAs(const std::string& what, nb::handle value) {
  try {
    return nb::cast<T>(value);
  } catch (const nb::cast_error&) {
    throw nb::type_error((what + " must be " + OptionKind(typeid(T)) + ", not " +
                          Py_TYPE(value.ptr())->tp_name).c_str());
  }
}
uint64_t OptionUint(const std::string& what, nb::handle value);

// Window statistics as a dict: seq, start_s, duration_s, and per class
// ("interactive", "batch", "all") the ClassStats fields of nvmw/stats.h.
nb::dict StatsToDict(const WindowStats& stats);

void BindCore(nb::module_& m);         // bind_core.cc: Status errors, engines, middleware
void BindEngineBench(nb::module_& m);  // bind_engine_bench.cc: `nvmw bench engine`
void BindEngineCheck(nb::module_& m);  // bind_engine_check.cc: `nvmw check`
void BindOverheadBench(nb::module_& m);// bind_overhead.cc: `nvmw bench overhead`
void BindDevice(nb::module_& m);       // bind_device.cc: device model, emulated device
void BindTrace(nb::module_& m);        // bind_trace.cc: trace readers, synth, replay
void BindYcsb(nb::module_& m);         // bind_ycsb.cc: YCSB-style generator
void BindSim(nb::module_& m);          // bind_sim.cc: the simulator (nvmw/sim.h)
void BindServer(nb::module_& m);       // bind_server.cc: the Redis-protocol server (nvmw/server.h)

}  // namespace nvmw::py

#endif  // NVMW_PYTHON_BIND_H_
