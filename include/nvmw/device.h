// Device model and emulated device: an Intel Optane DC PMem model calibrated on the
// FAST'20 measurements, and an Engine wrapper that makes every access take that long.
//
// Parameters are data: a profile (python/nvmw/data/devices/<name>.toml) names the
// CSV files and columns it is built from; LoadDeviceProfile parses them into a
// DeviceProfile (curves as vectors). Nothing in the code knows an Optane number.
// The model and its limits are described in docs/device.md.
#ifndef NVMW_DEVICE_H_
#define NVMW_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nvmw/engine.h"
#include "nvmw/status.h"

namespace nvmw {

enum class DeviceOp : uint8_t { kRead = 0, kWrite = 1 };

// "read" / "write".
const char* DeviceOpName(DeviceOp op);

// A piecewise-linear function y(x) through measured points; x strictly increasing.
// Outside [x.front(), x.back()] it holds the end value (no extrapolation). An empty
// curve is the constant 1 (used for optional factors). A NaN gives the first point's value.
struct DeviceCurve {
  std::vector<double> x;
  std::vector<double> y;

  bool empty() const { return x.empty(); }
  double At(double at) const;
};

// Everything the model needs, in model units: nanoseconds, bytes, bytes/ns
// (1 byte/ns = 1 GB/s). Built by LoadDeviceProfile, or field by field (Python).
struct DeviceProfile {
  // Profile name ("none", "optane-1dimm", ...) and one line saying what it models.
  std::string name;
  std::string description;

  // True: no device model at all (profile "none"); the curves below are ignored and
  // an emulated device is a plain pass-through.
  bool passthrough = true;

  // Idle latency of one access, paid once per access on top of its transfer.
  double read_latency_ns = 0;
  double write_latency_ns = 0;

  // Aggregate device bandwidth (bytes/ns) vs the number of concurrent accessors, for
  // streams of `size_reference_bytes` accesses. x: accessors (>= 1).
  DeviceCurve read_bandwidth;
  DeviceCurve write_bandwidth;

  // Access-size efficiency: bandwidth at access size x divided by the bandwidth at
  // the reference size (1 at the reference). x: bytes. Empty = 1 everywhere.
  // Accesses smaller than x.front() cost as much as an access of x.front() bytes
  // (the device moves whole lines; a 30-byte write costs a 64-byte one).
  DeviceCurve read_size_efficiency;
  DeviceCurve write_size_efficiency;

  // Mixed readers and writers: multiplier on every accessor's rate vs the fraction
  // of accessors that write (x in [0, 1], y(0) = y(1) = 1). Empty = 1 (no penalty).
  DeviceCurve mix_factor;

  // Rare write stalls: with this probability a write takes `write_stall_ns` longer.
  // Probability 0 disables them.
  double write_stall_ns = 0;
  double write_stall_probability = 0;
};

// OK if the profile can drive a model: passthrough, or positive latencies/curves,
// increasing x, matching sizes, probabilities in [0, 1]. InvalidArgument says what is wrong.
Status ValidateDeviceProfile(const DeviceProfile& profile);

// Loads profile `name_or_path`: a name looks up `<devices_dir>/<name>.toml`; anything
// containing '/' or ending in ".toml" is a path to a profile file. CSV files named by the
// profile are resolved relative to the profile file's `data_dir` key (itself relative to
// the profile file). Errors: NotFound (no such profile/CSV), InvalidArgument (bad TOML,
// missing key/column/row, non-numeric cell; the message names file and line).
// The result is validated.
Status LoadDeviceProfile(const std::string& devices_dir, const std::string& name_or_path,
                         DeviceProfile* profile);

// The device model proper: pure functions of a validated profile. Thread-safe (const).
// The emulated device (real time) and the simulator (virtual time) both use it.
class DeviceModel {
 public:
  // `profile` must pass ValidateDeviceProfile (checked by an assert in debug builds).
  explicit DeviceModel(const DeviceProfile& profile);

  const DeviceProfile& profile() const { return profile_; }
  bool passthrough() const { return profile_.passthrough; }

  // Idle latency of one access of this kind.
  double LatencyNs(DeviceOp op) const;

  // Work of an access in "reference bytes": bytes / size efficiency (small accesses
  // are rounded up to the smallest measured size first). Transfer time = work / rate.
  double WorkBytes(DeviceOp op, uint64_t bytes) const;

  // Rate (reference bytes per ns) that each active accessor of kind `op` gets while
  // `readers` readers and `writers` writers are active (its own kind counted, so
  // readers + writers >= 1): the device bandwidth at readers + writers accessors,
  // shared equally, times the mix factor at writers / (readers + writers).
  double RatePerAccessor(DeviceOp op, uint32_t readers, uint32_t writers) const;

  // Aggregate bandwidth (bytes/ns = GB/s) of `accessors` accessors all doing `op` with
  // back-to-back accesses of `bytes` bytes, ignoring the per-access latency.
  double BandwidthBytesPerNs(DeviceOp op, uint32_t accessors, uint64_t bytes) const;

  // Time one access takes if the set of active accessors (including itself) stays
  // fixed while it runs: latency + work / rate. No stall. 0 for a passthrough profile.
  double ServiceTimeNs(DeviceOp op, uint64_t bytes, uint32_t readers, uint32_t writers) const;
  // Same, with `accessors` accessors all of the kind `op`.
  double ServiceTimeNs(DeviceOp op, uint64_t bytes, uint32_t accessors) const;

 private:
  DeviceProfile profile_;
};

struct EmulatedDeviceOptions {
  // Apply the profile's rare write stalls (if its probability is > 0). Turn off for
  // reproducible latency measurements.
  bool write_stalls = true;
  // Seed of the stall draws.
  uint64_t seed = 42;
  // A wait expected to end within this many ns busy-waits instead of sleeping: a
  // sleep/wake round trip costs 15-30 us on a small machine, far more than a short
  // access. Longer waits always sleep (futex / absolute-deadline clock_nanosleep).
  uint64_t spin_below_ns = 5000;
  // At most this many threads busy-wait at once (0 = half the cores, at least 1);
  // the rest sleep even for short waits, so hundreds of clients stay cheap.
  uint32_t max_spinning_threads = 0;
  // The timer thread may wake up this late (absolute ns, or this fraction of the time
  // left, whichever is larger) rather than being re-armed by every small rate change.
  // Lateness delays a waiter's wake-up, never the emulator's own accounting.
  uint64_t timer_tolerance_ns = 2000;
  double timer_tolerance_fraction = 0.01;
};

// The emulator's own accounting, in its own (exact, modelled) time. Differences of two
// snapshots give bandwidth and mean concurrency over an interval.
struct EmulatedDeviceStats {
  double clock_ns = 0;              // emulator time of this snapshot (since creation)
  double busy_ns = 0;               // time with at least one access in transfer
  double accessor_ns = 0;           // integral of active accessors over time
  uint64_t accesses[2] = {0, 0};    // completed transfers, [read, write]
  uint64_t bytes[2] = {0, 0};       // their requested bytes
  double served_bytes[2] = {0, 0};  // reference bytes transferred so far (continuous)
  uint64_t write_stalls = 0;        // writes that drew a stall
  uint32_t active[2] = {0, 0};      // accessors in transfer now, [read, write]
};

// An Engine that performs every operation on `base` and then holds the emulated
// device for the modelled time of that access. Concurrent accesses share the device
// (processor sharing): each active accessor progresses at RatePerAccessor() for the
// current mix, so an access speeds up or slows down as others come and go. Exact in
// modelled time (an event-driven scheduler); a waiting thread may wake a few us late.
// Charges: Get = read of key + value bytes (key only when not found), Exists = read of
// the key, Put = write of key + value, Remove = write of the key, Count = nothing;
// operations rejected by the base engine (InvalidArgument, NoSpace, ...) cost nothing.
// Thread-safe. Name() is "emulated".
class EmulatedDevice : public Engine {
 public:
  // Snapshot of the accounting (advances the emulator clock to now first).
  virtual EmulatedDeviceStats GetStats() = 0;
  virtual const DeviceModel& model() const = 0;
};

// Wraps `base` (not owned: it must outlive the result). Returns nullptr if
// ValidateDeviceProfile(profile) fails or the operating system refuses the device's
// timer thread. A passthrough profile gives a wrapper whose
// only cost is a branch. Use dynamic_cast<EmulatedDevice*> to read its stats.
std::unique_ptr<Engine> NewEmulatedDevice(Engine* base, const DeviceProfile& profile,
                                          const EmulatedDeviceOptions& options);

// Closed-loop bandwidth run: `threads` threads each repeat one `op` of `bytes` bytes
// through an emulated device over a fresh MemoryEngine, for `duration_ms` after
// `warmup_ms`. Used by the tests and `_core.device_bench`; results in both clocks.
struct DeviceBenchOptions {
  DeviceOp op = DeviceOp::kWrite;
  uint32_t threads = 1;
  uint64_t bytes = 1 << 20;   // value size; keys are short
  uint32_t warmup_ms = 50;    // ramp-up excluded from the figures
  uint32_t duration_ms = 250; // measured interval
  EmulatedDeviceOptions device;
};

struct DeviceBenchResult {
  // From the emulator's accounting over the measured interval. The "busy" figures
  // leave out moments with no access in transfer (a starved host's gaps between a
  // thread's operations), so they describe the device, not the host.
  double emulated_bandwidth_bytes_per_ns = 0;  // served bytes / emulator time
  double mean_active_accessors = 0;            // accessor_ns / emulator time
  double busy_bandwidth_bytes_per_ns = 0;      // served bytes / busy time
  double mean_active_while_busy = 0;           // accessor_ns / busy time
  // From the clients: bytes of operations completed in the interval / wall time.
  double wall_bandwidth_bytes_per_ns = 0;
  double wall_seconds = 0;
  uint64_t operations = 0;  // completed in the interval
  // Clients' wall-clock latency of one operation (host op + device), over the interval,
  // next to the model's service time with `threads` accessors of the same kind.
  double p50_latency_us = 0;
  double p99_latency_us = 0;
  double model_service_time_us = 0;
};

Status RunDeviceBench(const DeviceProfile& profile, const DeviceBenchOptions& options,
                      DeviceBenchResult* result);

}  // namespace nvmw

#endif  // NVMW_DEVICE_H_
