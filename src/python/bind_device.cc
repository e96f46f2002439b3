// Bindings of the device area: DeviceProfile/DeviceCurve (loaded by the C++ loader or
// built field by field), DeviceModel, emulate_device() over a _core.Engine, and the
// device_bench() closed-loop measurement.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <memory>
#include <string>

#include "nvmw/device.h"
#include "python/bind.h"

namespace nvmw::py {

namespace {

DeviceOp ParseOp(const std::string& op) {
  if (op == "read") return DeviceOp::kRead;
  if (op == "write") return DeviceOp::kWrite;
  ThrowIfError(Status::InvalidArgument("device op must be 'read' or 'write', not '" + op + "'"));
  return DeviceOp::kRead;
}

uint32_t CheckAccessors(int64_t n) {
  if (n < 1 || n > (1 << 20)) {
    ThrowIfError(Status::InvalidArgument("accessors must be in [1, 1048576]"));
  }
  return static_cast<uint32_t>(n);
}

// Readers and writers of a mixed access, each in [0, 2^20] (the model's counts are
// 32-bit: a larger number would wrap around to a different one), at least one in all.
void CheckMix(int64_t readers, int64_t writers) {
  if (readers < 0 || writers < 0 || readers > (1 << 20) || writers > (1 << 20) ||
      readers + writers < 1) {
    ThrowIfError(Status::InvalidArgument(
        "readers and writers must each be in [0, 1048576], at least one in all; got " +
        std::to_string(readers) + " and " + std::to_string(writers)));
  }
}

uint64_t CheckBytes(int64_t bytes) {
  if (bytes < 0) ThrowIfError(Status::InvalidArgument("bytes must be >= 0"));
  return static_cast<uint64_t>(bytes);
}

nb::dict StatsDict(const EmulatedDeviceStats& s) {
  nb::dict d;
  d["clock_ns"] = s.clock_ns;
  d["busy_ns"] = s.busy_ns;
  d["accessor_ns"] = s.accessor_ns;
  d["read_accesses"] = s.accesses[0];
  d["write_accesses"] = s.accesses[1];
  d["read_bytes"] = s.bytes[0];
  d["write_bytes"] = s.bytes[1];
  d["read_served_bytes"] = s.served_bytes[0];
  d["write_served_bytes"] = s.served_bytes[1];
  d["write_stalls"] = s.write_stalls;
  d["active_readers"] = s.active[0];
  d["active_writers"] = s.active[1];
  return d;
}

}  // namespace

void BindDevice(nb::module_& m) {
  nb::class_<DeviceCurve>(m, "DeviceCurve",
                          "Piecewise-linear curve through measured points (x increasing); holds "
                          "the end values outside its range; empty = constant 1.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](DeviceCurve* self, std::vector<double> x, std::vector<double> y) {
            new (self) DeviceCurve{std::move(x), std::move(y)};
          },
          nb::arg("x"), nb::arg("y"))
      .def_rw("x", &DeviceCurve::x)
      .def_rw("y", &DeviceCurve::y)
      .def(
          "__call__",
          [](const DeviceCurve& c, double at) {
            // At() indexes y by x's positions: both must match, and a NaN would find no
            // segment (it compares false with every point).
            if (c.x.size() != c.y.size()) {
              ThrowIfError(Status::InvalidArgument(
                  "DeviceCurve has " + std::to_string(c.x.size()) + " x values but " +
                  std::to_string(c.y.size()) + " y values"));
            }
            if (std::isnan(at)) ThrowIfError(Status::InvalidArgument("DeviceCurve: x is NaN"));
            return c.At(at);
          },
          nb::arg("x"))
      .def("__len__", [](const DeviceCurve& c) { return c.x.size(); })
      .def("__repr__", [](const DeviceCurve& c) {
        return "DeviceCurve(" + std::to_string(c.x.size()) + " points)";
      });

  nb::class_<DeviceProfile>(
      m, "DeviceProfile",
      "Parameters of the device model in model units (ns, bytes, bytes/ns = GB/s). "
      "Load one with nvmw.lab.device.load_profile(), or set the fields and call validate().")
      .def(nb::init<>())
      .def_rw("name", &DeviceProfile::name)
      .def_rw("description", &DeviceProfile::description)
      .def_rw("passthrough", &DeviceProfile::passthrough)
      .def_rw("read_latency_ns", &DeviceProfile::read_latency_ns)
      .def_rw("write_latency_ns", &DeviceProfile::write_latency_ns)
      .def_rw("read_bandwidth", &DeviceProfile::read_bandwidth)
      .def_rw("write_bandwidth", &DeviceProfile::write_bandwidth)
      .def_rw("read_size_efficiency", &DeviceProfile::read_size_efficiency)
      .def_rw("write_size_efficiency", &DeviceProfile::write_size_efficiency)
      .def_rw("mix_factor", &DeviceProfile::mix_factor)
      .def_rw("write_stall_ns", &DeviceProfile::write_stall_ns)
      .def_rw("write_stall_probability", &DeviceProfile::write_stall_probability)
      .def("validate", [](const DeviceProfile& p) { ThrowIfError(ValidateDeviceProfile(p)); },
           "Raise InvalidArgumentError if the profile cannot drive a model.")
      .def("__repr__", [](const DeviceProfile& p) {
        return "DeviceProfile(name='" + p.name + "'" + (p.passthrough ? ", passthrough" : "") + ")";
      });

  m.def(
      "load_device_profile",
      [](const std::string& devices_dir, const std::string& name_or_path) {
        CheckPath("devices_dir", devices_dir);
        CheckPath("device profile", name_or_path);
        DeviceProfile p;
        ThrowIfError(LoadDeviceProfile(devices_dir, name_or_path, &p));
        return p;
      },
      nb::arg("devices_dir"), nb::arg("name_or_path"),
      "Load a profile by name from devices_dir, or from a .toml path (the one loader C++ uses).");

  nb::class_<DeviceModel>(m, "DeviceModel",
                          "Service time and bandwidth of one access from a DeviceProfile. "
                          "op is 'read' or 'write'; bandwidths are bytes/ns (= GB/s).")
      .def(
          "__init__",
          [](DeviceModel* self, const DeviceProfile& p) {
            ThrowIfError(ValidateDeviceProfile(p));
            new (self) DeviceModel(p);
          },
          nb::arg("profile"))
      .def_prop_ro("profile", &DeviceModel::profile)
      .def("latency_ns", [](const DeviceModel& d, const std::string& op) {
        return d.LatencyNs(ParseOp(op));
      }, nb::arg("op"))
      .def("work_bytes", [](const DeviceModel& d, const std::string& op, int64_t bytes) {
        return d.WorkBytes(ParseOp(op), CheckBytes(bytes));
      }, nb::arg("op"), nb::arg("bytes"))
      .def("rate_per_accessor",
           [](const DeviceModel& d, const std::string& op, int64_t readers, int64_t writers) {
             CheckMix(readers, writers);
             return d.RatePerAccessor(ParseOp(op), uint32_t(readers), uint32_t(writers));
           },
           nb::arg("op"), nb::arg("readers"), nb::arg("writers"))
      .def("bandwidth",
           [](const DeviceModel& d, const std::string& op, int64_t n, int64_t bytes) {
             return d.BandwidthBytesPerNs(ParseOp(op), CheckAccessors(n), CheckBytes(bytes));
           },
           nb::arg("op"), nb::arg("n"), nb::arg("bytes") = int64_t(2) << 20,
           "Aggregate bandwidth (GB/s) of n accessors streaming accesses of `bytes`.")
      .def("service_time_ns",
           [](const DeviceModel& d, const std::string& op, int64_t bytes, int64_t n) {
             return d.ServiceTimeNs(ParseOp(op), CheckBytes(bytes), CheckAccessors(n));
           },
           nb::arg("op"), nb::arg("bytes"), nb::arg("n") = 1,
           "Time of one access while n accessors of the same kind (itself included) are active.")
      .def("mixed_service_time_ns",
           [](const DeviceModel& d, const std::string& op, int64_t bytes, int64_t readers,
              int64_t writers) {
             CheckMix(readers, writers);
             return d.ServiceTimeNs(ParseOp(op), CheckBytes(bytes), uint32_t(readers),
                                    uint32_t(writers));
           },
           nb::arg("op"), nb::arg("bytes"), nb::arg("readers"), nb::arg("writers"));

  m.def(
      "emulate_device",
      [](std::shared_ptr<PyEngine> base, const DeviceProfile& profile, bool write_stalls,
         uint64_t seed, uint64_t spin_below_ns, uint32_t max_spinning_threads) {
        if (!base || !base->engine)
          ThrowIfError(Status::InvalidArgument("engine is closed or missing"));
        RefuseAfterFork(base->fork_generation, "emulate_device", "engine");
        ThrowIfError(ValidateDeviceProfile(profile));
        EmulatedDeviceOptions o;
        o.write_stalls = write_stalls;
        o.seed = seed;
        o.spin_below_ns = spin_below_ns;
        o.max_spinning_threads = max_spinning_threads;
        auto h = std::make_shared<PyEngine>();
        h->engine = NewEmulatedDevice(base->engine.get(), profile, o);
        if (!h->engine) ThrowIfError(Status::IOError("cannot start the emulated device's timer thread"));
        h->base = std::move(base);  // the wrapped engine lives as long as the wrapper
        return h;
      },
      nb::arg("engine"), nb::arg("profile"), nb::arg("write_stalls") = true,
      nb::arg("seed") = EmulatedDeviceOptions().seed,
      nb::arg("spin_below_ns") = EmulatedDeviceOptions().spin_below_ns,
      nb::arg("max_spinning_threads") = EmulatedDeviceOptions().max_spinning_threads,
      "Wrap an engine in an emulated device: every access also holds the device for its "
      "modelled time (processor sharing among concurrent accesses).");

  m.def(
      "emulated_device_stats",
      [](std::shared_ptr<PyEngine> engine) {
        auto* dev = engine && engine->engine ? dynamic_cast<EmulatedDevice*>(engine->engine.get())
                                             : nullptr;
        if (dev == nullptr)
          ThrowIfError(Status::InvalidArgument("engine is not an emulated device"));
        return StatsDict(dev->GetStats());
      },
      nb::arg("engine"), "The emulator's own accounting (modelled time) as a dict.");

  m.def(
      "device_bench",
      [](const DeviceProfile& profile, const std::string& op, uint32_t threads, uint64_t bytes,
         uint32_t warmup_ms, uint32_t duration_ms) {
        DeviceBenchOptions o;
        o.op = ParseOp(op);
        o.threads = threads;
        o.bytes = bytes;
        o.warmup_ms = warmup_ms;
        o.duration_ms = duration_ms;
        DeviceBenchResult r;
        Status s;
        {
          nb::gil_scoped_release release;
          s = RunDeviceBench(profile, o, &r);
        }
        ThrowIfError(s);
        nb::dict d;
        d["profile"] = profile.name;
        d["op"] = op;
        d["threads"] = threads;
        d["bytes"] = bytes;
        d["emulated_gbps"] = r.emulated_bandwidth_bytes_per_ns;
        d["wall_gbps"] = r.wall_bandwidth_bytes_per_ns;
        d["mean_active_accessors"] = r.mean_active_accessors;
        d["busy_gbps"] = r.busy_bandwidth_bytes_per_ns;
        d["mean_active_while_busy"] = r.mean_active_while_busy;
        d["operations"] = r.operations;
        d["wall_seconds"] = r.wall_seconds;
        d["p50_latency_us"] = r.p50_latency_us;
        d["p99_latency_us"] = r.p99_latency_us;
        d["model_service_time_us"] = r.model_service_time_us;
        return d;
      },
      nb::arg("profile"), nb::arg("op") = "write", nb::arg("threads") = 1,
      nb::arg("bytes") = uint64_t(1) << 20, nb::arg("warmup_ms") = 50,
      nb::arg("duration_ms") = 250,
      "Closed-loop threads through an emulated device over a memory engine; bandwidth from "
      "the emulator's accounting (emulated_gbps) and from the clients' wall clock.");
}

}  // namespace nvmw::py
