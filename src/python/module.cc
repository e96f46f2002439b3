// The nanobind extension `nvmw._core`. Each area binds itself in its own file so
// that the parts can grow independently; this file only calls them in order.
#include <nanobind/nanobind.h>

#include "python/bind.h"

NB_MODULE(_core, m) {
  m.doc() = "nvmw C++ core: engines, middleware, device model, workloads, benchmarks, simulator";
  nvmw::py::BindCore(m);
  nvmw::py::BindEngineBench(m);
  nvmw::py::BindEngineCheck(m);
  nvmw::py::BindOverheadBench(m);
  nvmw::py::BindDevice(m);
  nvmw::py::BindTrace(m);
  nvmw::py::BindYcsb(m);
  nvmw::py::BindSim(m);
  nvmw::py::BindServer(m);
}
