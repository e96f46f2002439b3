// Declarations shared by the binding files of nvmw._core.
#ifndef NVMW_PYTHON_BIND_H_
#define NVMW_PYTHON_BIND_H_

#include <nanobind/nanobind.h>

#include <memory>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/status.h"

namespace nvmw::py {

namespace nb = nanobind;

// Raises the Python exception that matches status (nvmw.errors) unless it is OK.
// NotFound raises nvmw.errors.NotFoundError; callers that map it to None check first.
void ThrowIfError(const Status& status);

// Python-visible engine (`_core.Engine`): owns an Engine and keeps alive the engine
// it wraps, if any (an emulated device wraps a pmem or memory engine).
struct PyEngine {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<PyEngine> base;
};

// Python-visible middleware (`_core.Middleware`): owns the Middleware and keeps its
// engine alive until the middleware has stopped. Workload generators take `mw.get()`.
struct PyMiddleware {
  std::shared_ptr<PyEngine> engine;
  std::unique_ptr<Middleware> mw;
};

// Window statistics as a dict: seq, start_s, duration_s, and per class
// ("interactive", "batch", "all") the ClassStats fields of nvmw/stats.h.
nb::dict StatsToDict(const WindowStats& stats);

void BindCore(nb::module_& m);         // bind_core.cc: Status errors, engines, middleware
void BindEngineBench(nb::module_& m);  // bind_engine_bench.cc: `nvmw bench engine`
void BindOverheadBench(nb::module_& m);// bind_overhead.cc: `nvmw bench overhead`
void BindDevice(nb::module_& m);       // bind_device.cc: device model, emulated device
void BindTrace(nb::module_& m);        // bind_trace.cc: trace readers, synth, replay
void BindYcsb(nb::module_& m);         // bind_ycsb.cc: YCSB-style generator
void BindSim(nb::module_& m);          // bind_sim.cc: the simulator (nvmw/sim.h)

}  // namespace nvmw::py

#endif  // NVMW_PYTHON_BIND_H_
