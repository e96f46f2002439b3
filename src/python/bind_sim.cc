// Python binding of the simulator (include/nvmw/sim.h): `_core.Simulator`, driven by
// the Python simulator environment (SimEnv). Parameters travel as dicts so that a
// fitted parameter file (JSON) maps onto SimParams field by field.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <string>

#include "nvmw/sim.h"
#include "python/bind.h"

namespace nvmw::py {

namespace {

namespace nb = nanobind;

const char* const kParamNames[] = {"cores", "background", "client_cpu_us", "wake_cpu_us",
                                   "op_cpu_us", "copy_bytes_per_ns", "jitter", "quantum_us",
                                   "spin_us"};

double* ParamField(SimParams& p, const std::string& name) {
  if (name == "cores") return &p.cores;
  if (name == "background") return &p.background;
  if (name == "client_cpu_us") return &p.client_cpu_us;
  if (name == "wake_cpu_us") return &p.wake_cpu_us;
  if (name == "op_cpu_us") return &p.op_cpu_us;
  if (name == "copy_bytes_per_ns") return &p.copy_bytes_per_ns;
  if (name == "jitter") return &p.jitter;
  if (name == "quantum_us") return &p.quantum_us;
  if (name == "spin_us") return &p.spin_us;
  return nullptr;
}

SimParams ParamsFromDict(const nb::dict& d) {
  SimParams p;
  for (auto [k, v] : d) {
    const std::string name = OptionName("sim params", k);
    double* f = ParamField(p, name);
    if (f == nullptr) {
      throw nb::value_error(("unknown sim parameter '" + name +
                             "' (cores, background, client_cpu_us, wake_cpu_us, op_cpu_us, "
                             "copy_bytes_per_ns, jitter, quantum_us, spin_us)").c_str());
    }
    *f = OptionAs<double>("sim param " + name, v);
  }
  return p;
}

SimClassWorkload WorkloadFromDict(const nb::dict& d) {
  SimClassWorkload w;
  for (auto [k, v] : d) {
    const std::string name = OptionName("workload", k);
    if (name == "times_us") w.times_us = OptionAs<std::vector<double>>("workload " + name, v);
    else if (name == "writes") w.writes = OptionAs<std::vector<uint8_t>>("workload " + name, v);
    else if (name == "bytes") w.bytes = OptionAs<std::vector<uint32_t>>("workload " + name, v);
    else if (name == "period_us") w.period_us = OptionAs<double>("workload " + name, v);
    else if (name == "clients") w.clients = OptionAs<int>("workload " + name, v);
    else if (name == "async") w.async = OptionAs<bool>("workload " + name, v);
    else throw nb::value_error(("unknown workload key '" + name +
                                "' (times_us, writes, bytes, period_us, clients, async)").c_str());
  }
  return w;
}

// The execution path by its Python name (the same names as Middleware's `execution`).
Execution ExecutionFromName(const std::string& name) {
  if (name == "caller-runs") return Execution::kCallerRuns;
  if (name == "handoff") return Execution::kHandOff;
  throw nb::value_error(("execution must be \"caller-runs\" or \"handoff\", got \"" + name + "\"").c_str());
}

const char* ExecutionName(Execution e) { return e == Execution::kHandOff ? "handoff" : "caller-runs"; }

// The Simulator is single-threaded; run_window releases the GIL, so a call from
// another Python thread meanwhile would race with it. Every call that reaches the
// Simulator takes `mu`, with the GIL released while it waits.
struct PySimulator {
  std::unique_ptr<Simulator> sim;
  Execution execution = Execution::kCallerRuns;
  std::mutex mu;

  template <typename Fn>
  auto Locked(Fn fn) {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu);
    return fn();
  }
};

}  // namespace

void BindSim(nb::module_& m) {
  nb::list names;
  for (const char* n : kParamNames) names.append(n);
  m.attr("SIM_PARAM_NAMES") = nb::tuple(names);
  m.attr("SIM_EXECUTIONS") = nb::make_tuple(ExecutionName(Execution::kCallerRuns),
                                            ExecutionName(Execution::kHandOff));
  m.def("sim_default_params", [] {
    SimParams p;
    nb::dict d;
    for (const char* n : kParamNames) d[n] = *ParamField(p, n);
    return d;
  }, "SimParams defaults as a dict.");

  nb::class_<PySimulator>(m, "Simulator",
                          "Virtual-time discrete-event model of nvmw (include/nvmw/sim.h).")
      .def(
          "__init__",
          [](PySimulator* self, const nb::dict& params, const DeviceProfile* device, bool control,
             int interactive_threads, int batch_threads, int max_threads, int no_control_max_inflight,
             double window_s, uint64_t seed, const std::string& execution, bool fast_forward,
             int ff_min_ops, double ff_chunk_s, double ff_tolerance) {
            SimOptions o;
            o.execution = ExecutionFromName(execution);
            o.params = ParamsFromDict(params);
            if (device != nullptr) o.device = *device;
            o.control = control;
            o.interactive_threads = interactive_threads;
            o.batch_threads = batch_threads;
            o.max_threads = max_threads;
            o.no_control_max_inflight = no_control_max_inflight;
            o.window_s = window_s;
            o.seed = seed;
            o.fast_forward = fast_forward;
            o.ff_min_ops = ff_min_ops;
            o.ff_chunk_s = ff_chunk_s;
            o.ff_tolerance = ff_tolerance;
            new (self) PySimulator();
            self->execution = o.execution;
            ThrowIfError(Simulator::Create(o, &self->sim));
          },
          nb::arg("params"), nb::arg("device").none() = nb::none(), nb::arg("control") = true,
          nb::arg("interactive_threads") = 15, nb::arg("batch_threads") = 15, nb::arg("max_threads") = 32,
          nb::arg("no_control_max_inflight") = 200, nb::arg("window_s") = 1.0, nb::arg("seed") = 0,
          nb::arg("execution") = "caller-runs", nb::arg("fast_forward") = true, nb::arg("ff_min_ops") = 1000,
          nb::arg("ff_chunk_s") = 0.005, nb::arg("ff_tolerance") = 0.25,
          "execution: \"caller-runs\" (a class's thread count is its number of permits; a sync\n"
          "request holding one runs on its client's thread) or \"handoff\" (workers run every\n"
          "request), as Middleware's execution option. fast_forward: once a window is in steady\n"
          "state (busy clients level over chunks of ff_chunk_s holding >= ff_min_ops interactive\n"
          "completions), extrapolate its rest instead of simulating it (docs/sim.md); False\n"
          "simulates every window whole (the exact mode).")
      .def(
          "set_workload",
          [](PySimulator& self, const nb::dict& interactive, const nb::dict& batch, double start_offset_us) {
            const SimClassWorkload wi = WorkloadFromDict(interactive), wb = WorkloadFromDict(batch);
            ThrowIfError(self.Locked([&] { return self.sim->SetWorkload(wi, wb, start_offset_us); }));
          },
          nb::arg("interactive"), nb::arg("batch"), nb::arg("start_offset_us") = 0.0,
          "Replace the offered workload: dicts with times_us, writes, bytes, period_us, clients\n"
          "and optionally async (True: submitted as Middleware.submit, run by the class's workers).")
      .def("set_threads",
           [](PySimulator& self, int i, int b) { ThrowIfError(self.Locked([&] { return self.sim->SetThreads(i, b); })); },
           nb::arg("interactive"), nb::arg("batch"))
      .def_prop_ro("threads", [](PySimulator& self) {
        int i = 0, b = 0;
        self.Locked([&] { self.sim->GetThreads(&i, &b); });
        return nb::make_tuple(i, b);
      })
      .def("run_window", [](PySimulator& self) {
        WindowStats w;
        ThrowIfError(self.Locked([&] { return self.sim->RunWindow(&w); }));
        return StatsToDict(w);
      }, "Advance one window of virtual time; the window's stats dict (as Middleware.get_stats).")
      .def_prop_ro("execution", [](const PySimulator& self) { return ExecutionName(self.execution); })
      .def_prop_ro("now_s", [](PySimulator& self) { return self.Locked([&] { return self.sim->now_s(); }); })
      .def_prop_ro("virtual_s", [](PySimulator& self) { return self.Locked([&] { return self.sim->virtual_s(); }); })
      .def_prop_ro("events", [](PySimulator& self) { return self.Locked([&] { return self.sim->events(); }); });
}

}  // namespace nvmw::py
