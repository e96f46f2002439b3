// Binding of CheckPmemPool (`nvmw check`): examine a pool file without modifying
// it, optionally salvaging every intact entry into a new pool.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "python/bind.h"

namespace nvmw::py {

void BindEngineCheck(nb::module_& m) {
  m.def(
      "check_pmem_pool",
      [](nb::handle path_arg, nb::handle salvage_to_arg, uint64_t salvage_pool_size_bytes,
         nb::handle scratch_dir_arg) {
        // Paths as the file system's bytes: a name that is not UTF-8 is a file too.
        const std::string path = FsPath("path", path_arg);
        const std::string salvage_to = FsPath("salvage_to", salvage_to_arg);
        const std::string scratch_dir = FsPath("scratch_dir", scratch_dir_arg);
        PmemCheckOptions o;
        o.salvage_path = salvage_to;
        o.salvage_options.pool_size_bytes = salvage_pool_size_bytes;
        o.scratch_dir = scratch_dir;
        PmemCheckReport r;
        Status s;
        {
          nb::gil_scoped_release release;
          s = CheckPmemPool(path, o, &r);
        }
        ThrowIfError(s);
        nb::dict d;
        d["nvmw_pool"] = r.nvmw_pool;
        d["readable"] = r.readable;
        d["format_version"] = r.format_version;
        d["entries_ok"] = r.entries_ok;
        d["entries_damaged"] = r.entries_damaged;
        d["links_damaged"] = r.links_damaged;
        d["unreachable"] = r.unreachable;
        d["salvaged"] = r.salvaged;
        d["clean"] = r.clean();
        nb::list problems;
        for (const std::string& p : r.problems) {
          // A problem may quote the pool's name, which need not be UTF-8: shown escaped.
          PyObject* text = PyUnicode_DecodeUTF8(p.data(), static_cast<Py_ssize_t>(p.size()), "backslashreplace");
          if (text == nullptr) throw nb::python_error();
          problems.append(nb::steal(text));
        }
        d["problems"] = problems;
        return d;
      },
      nb::arg("path").none(), nb::arg("salvage_to").none() = "",
      nb::arg("salvage_pool_size_bytes") = PmemOptions().pool_size_bytes,
      nb::arg("scratch_dir").none() = "",
      "Check the pmem pool at `path` without modifying it (libpmemobj maps a sparse scratch\n"
      "copy in `scratch_dir`, default the pool's directory). Returns a dict: nvmw_pool\n"
      "(the file is an nvmw pool of this format, so what is wrong in it is damage; false:\n"
      "not a pool this nvmw can check), readable, format_version, entries_ok,\n"
      "entries_damaged, links_damaged, unreachable, salvaged, clean and problems (one line\n"
      "each). With `salvage_to`, every intact entry is copied into a new pool there. Raises\n"
      "NotFoundError, StorageIOError (unreadable, open in another process, scratch copy or\n"
      "salvage failed), NoSpaceError (salvage pool full), InvalidArgumentError (salvage\n"
      "target exists).");
}

}  // namespace nvmw::py
