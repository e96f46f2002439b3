// RunDeviceBench: closed-loop threads push one kind of access through an emulated
// device over a MemoryEngine; bandwidth from the emulator's accounting and from the
// wall clock. The emulator-side figure is what the tests check (it is modelled time,
// immune to a busy host); the wall-clock figure shows how faithfully it was played out.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "nvmw/device.h"

namespace nvmw {

Status RunDeviceBench(const DeviceProfile& profile, const DeviceBenchOptions& options,
                      DeviceBenchResult* result) {
  Status s = ValidateDeviceProfile(profile);
  if (!s.ok()) return s;
  if (profile.passthrough) {
    return Status::InvalidArgument("device bench needs a device model, not a passthrough profile");
  }
  if (options.threads < 1 || options.threads > 4096) {
    return Status::InvalidArgument("device bench: threads must be in [1, 4096]");
  }
  if (options.bytes < 1 || options.bytes > (1ull << 30)) {
    return Status::InvalidArgument("device bench: bytes must be in [1, 1 GiB]");
  }
  if (options.duration_ms < 1) {
    return Status::InvalidArgument("device bench: duration_ms must be >= 1");
  }
  std::unique_ptr<Engine> memory = NewMemoryEngine();
  std::unique_ptr<Engine> engine = NewEmulatedDevice(memory.get(), profile, options.device);
  auto* device = dynamic_cast<EmulatedDevice*>(engine.get());
  if (device == nullptr) return Status::InvalidArgument("device bench: could not build device");

  const std::string value(options.bytes, 'v');
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < options.threads; ++i) {
    // Appended rather than "k" + to_string(i): GCC 12 -O3 warns falsely (-Wrestrict) on that.
    keys.emplace_back("k");
    keys.back() += std::to_string(i);
    // Loaded straight into the base engine: setup is not part of the measurement.
    s = memory->Put(keys.back(), value);
    if (!s.ok()) return s;
  }

  // 0: warm-up, 1: measuring, 2: stop.
  std::atomic<int> phase{0};
  std::atomic<uint64_t> measured_ops{0};
  std::atomic<bool> failed{false};
  // Per-thread latency samples (bounded), merged after the run.
  constexpr size_t kMaxSamplesPerThread = 200000;
  std::vector<std::vector<float>> latencies_us(options.threads);
  std::vector<std::thread> threads;
  threads.reserve(options.threads);
  try {
    for (uint32_t i = 0; i < options.threads; ++i) {
      threads.emplace_back([&, i] {
        uint64_t mine = 0;
        std::vector<float>& lat = latencies_us[i];
        while (phase.load(std::memory_order_relaxed) != 2) {
          auto start = std::chrono::steady_clock::now();
          Status st = options.op == DeviceOp::kWrite
                          ? engine->Put(keys[i], value)
                          : engine->Get(keys[i], [](std::string_view) {});
          if (!st.ok()) {
            failed = true;
            break;
          }
          if (phase.load(std::memory_order_relaxed) == 1) {
            ++mine;
            if (lat.size() < kMaxSamplesPerThread) {
              lat.push_back(std::chrono::duration<float, std::micro>(
                                std::chrono::steady_clock::now() - start).count());
            }
          }
        }
        measured_ops += mine;
      });
    }
  } catch (const std::system_error& e) {
    // The operating system refused a thread: stop and join the ones running.
    phase = 2;
    const size_t started = threads.size();
    for (auto& t : threads) t.join();
    return Status::IOError("device bench: could not start thread " + std::to_string(started + 1) + " of " +
                           std::to_string(options.threads) + " (" + e.what() + ")");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(options.warmup_ms));
  EmulatedDeviceStats before = device->GetStats();
  auto wall_start = std::chrono::steady_clock::now();
  phase = 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(options.duration_ms));
  phase = 2;
  auto wall_end = std::chrono::steady_clock::now();
  EmulatedDeviceStats after = device->GetStats();
  for (auto& t : threads) t.join();
  if (failed) return Status::IOError("device bench: an engine operation failed");

  const int k = static_cast<int>(options.op);
  const DeviceModel& model = device->model();
  // served_bytes counts reference bytes; convert back to requested bytes.
  double useful = static_cast<double>(options.bytes) / model.WorkBytes(options.op, options.bytes);
  double elapsed = after.clock_ns - before.clock_ns;
  DeviceBenchResult r;
  r.emulated_bandwidth_bytes_per_ns =
      (after.served_bytes[k] - before.served_bytes[k]) * useful / elapsed;
  r.mean_active_accessors = (after.accessor_ns - before.accessor_ns) / elapsed;
  double busy = after.busy_ns - before.busy_ns;
  if (busy > 0) {
    r.busy_bandwidth_bytes_per_ns =
        (after.served_bytes[k] - before.served_bytes[k]) * useful / busy;
    r.mean_active_while_busy = (after.accessor_ns - before.accessor_ns) / busy;
  }
  r.wall_seconds = std::chrono::duration<double>(wall_end - wall_start).count();
  r.operations = measured_ops.load();
  r.wall_bandwidth_bytes_per_ns =
      static_cast<double>(r.operations) * static_cast<double>(options.bytes) /
      (r.wall_seconds * 1e9);
  std::vector<float> all;
  for (const auto& v : latencies_us) all.insert(all.end(), v.begin(), v.end());
  if (!all.empty()) {
    auto pick = [&all](double q) {
      size_t at = std::min(all.size() - 1, static_cast<size_t>(q * all.size()));
      std::nth_element(all.begin(), all.begin() + at, all.end());
      return static_cast<double>(all[at]);
    };
    r.p50_latency_us = pick(0.50);
    r.p99_latency_us = pick(0.99);
  }
  r.model_service_time_us = model.ServiceTimeNs(options.op, options.bytes + keys[0].size(),
                                                options.threads) / 1e3;
  *result = r;
  return Status::OK();
}

}  // namespace nvmw
