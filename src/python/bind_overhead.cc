// Binding of the middleware overhead benchmark: `_core.run_overhead_bench(...) -> dict`
// (used by `nvmw bench overhead`). Runs with the GIL released.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include "bench/overhead_bench.h"
#include "python/bind.h"
#include "python/interrupt.h"

namespace nvmw::py {

void BindOverheadBench(nb::module_& m) {
  const OverheadBenchOptions d;
  m.def(
      "run_overhead_bench",
      [](uint64_t ops, uint64_t warmup_ops, uint64_t value_bytes, uint64_t keys,
         uint64_t condvar_rounds, uint64_t nospin_ops, uint64_t async_ops, int async_submitters,
         uint64_t async_window, int async_workers, double async_put_fraction, int64_t spin_ns,
         const std::string& pmem_pool_dir) {
        OverheadBenchOptions o;
        o.ops = ops;
        o.warmup_ops = warmup_ops;
        o.value_bytes = value_bytes;
        o.keys = keys;
        o.condvar_rounds = condvar_rounds;
        o.nospin_ops = nospin_ops;
        o.async_ops = async_ops;
        o.async_submitters = async_submitters;
        o.async_window = async_window;
        o.async_workers = async_workers;
        o.async_put_fraction = async_put_fraction;
        o.spin_ns = spin_ns;
        o.pmem_pool_dir = pmem_pool_dir;
        std::map<std::string, double> out;
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;  // Ctrl-C stops it between series
        Status s = RunInterruptibly([&] { return RunOverheadBench(o, &out); }, [&] { cancel.store(true); });
        ThrowIfError(s);
        return out;
      },
      nb::kw_only(), nb::arg("ops") = d.ops, nb::arg("warmup_ops") = d.warmup_ops,
      nb::arg("value_bytes") = d.value_bytes, nb::arg("keys") = d.keys,
      nb::arg("condvar_rounds") = d.condvar_rounds, nb::arg("nospin_ops") = d.nospin_ops,
      nb::arg("async_ops") = d.async_ops, nb::arg("async_submitters") = d.async_submitters,
      nb::arg("async_window") = d.async_window, nb::arg("async_workers") = d.async_workers,
      nb::arg("async_put_fraction") = d.async_put_fraction, nb::arg("spin_ns") = d.spin_ns,
      nb::arg("pmem_pool_dir") = d.pmem_pool_dir,
      "Middleware overhead benchmark on a memory engine, all series in one run, one client, "
      "sync Get: the direct engine call (direct_*, and direct_timed_* with the middleware's "
      "own latency measurement), the permit path (caller-runs, "
      "permits_*), the hand-off mode (handoff_mode_*, and handoff_nospin_* without "
      "spinning), a raw mutex+condvar two-thread round trip (condvar_*), their ratios "
      "(ratio_*), async throughput in both modes (async_ops_per_s, "
      "async_handoff_ops_per_s), the direct call and permit path on a pmem pool in "
      "pmem_pool_dir for a Get (pmem_*) and a durable Put (pmem_put_*; empty skips both), "
      "cores and load1.");
}

}  // namespace nvmw::py
