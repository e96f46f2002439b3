// Binding of the engine benchmark: `_core.run_engine_bench(...) -> dict` (used by
// `nvmw bench engine`). Runs with the GIL released.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "bench/engine_bench.h"
#include "python/bind.h"
#include "python/interrupt.h"

namespace nvmw::py {

void BindEngineBench(nb::module_& m) {
  const EngineBenchOptions d;
  m.def(
      "run_engine_bench",
      [](const std::string& engine, const std::string& pool_dir, int threads,
         uint64_t small_keys, uint64_t large_keys, uint64_t small_bytes, uint64_t large_bytes,
         bool prefault, bool huge_pages) {
        CheckPath("pool_dir", pool_dir);
        EngineBenchOptions o;
        o.engine = engine;
        o.pool_dir = pool_dir;
        o.threads = threads;
        o.small_keys = small_keys;
        o.large_keys = large_keys;
        o.small_bytes = small_bytes;
        o.large_bytes = large_bytes;
        o.prefault = prefault;
        o.huge_pages = huge_pages;
        std::map<std::string, double> out;
        std::atomic<bool> cancel{false};
        o.cancel = &cancel;  // Ctrl-C stops it between phases
        Status s = RunInterruptibly([&] { return RunEngineBench(o, &out); }, [&] { cancel.store(true); });
        ThrowIfError(s);
        // libpmem reads PMEM_IS_PMEM_FORCE once, when it is loaded; report it so
        // a figure taken without it (msync on every persist) is recognisable.
        const char* force = std::getenv("PMEM_IS_PMEM_FORCE");
        out["pmem_is_pmem_force"] = (force != nullptr && std::strcmp(force, "1") == 0) ? 1 : 0;
        return out;
      },
      nb::kw_only(), nb::arg("engine") = d.engine, nb::arg("pool_dir") = d.pool_dir,
      nb::arg("threads") = d.threads, nb::arg("small_keys") = d.small_keys,
      nb::arg("large_keys") = d.large_keys, nb::arg("small_bytes") = d.small_bytes,
      nb::arg("large_bytes") = d.large_bytes, nb::arg("prefault") = d.prefault,
      nb::arg("huge_pages") = d.huge_pages,
      "Engine benchmark: `threads` threads put then get small_keys values of small_bytes "
      "and large_keys values of large_bytes (pool in pool_dir, removed afterwards). Returns "
      "put/get_128_ops_per_s, put/get_800k_ops_per_s, put/get_800k_gb_per_s, threads, "
      "small_bytes, large_bytes, prefault, huge_pages_mib (the pool's MiB on 2 MiB pages when the "
      "timed phases began) and pmem_is_pmem_force (0/1).");
}

}  // namespace nvmw::py
