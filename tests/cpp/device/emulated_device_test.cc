// Tests of EmulatedDevice: it keeps the base engine's semantics, charges the modelled
// time in its own accounting, and, with real threads, reproduces Optane's write
// collapse (24 writers on one DIMM get less than half the 1-4 writer peak).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "device/device_test_util.h"
#include "nvmw/device.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using testing::Load;

EmulatedDevice* AsDevice(const std::unique_ptr<Engine>& e) {
  return dynamic_cast<EmulatedDevice*>(e.get());
}

TEST(EmulatedDeviceTest, KeepsEngineSemanticsAndChargesAccesses) {
  auto base = NewMemoryEngine();
  auto dev = NewEmulatedDevice(base.get(), Load("optane-1dimm"), EmulatedDeviceOptions());
  ASSERT_NE(dev, nullptr);
  EXPECT_STREQ(dev->Name(), "emulated");
  ASSERT_TRUE(dev->Put("key", std::string(1000, 'a')).ok());
  std::string v;
  ASSERT_TRUE(dev->Get("key", &v).ok());
  EXPECT_EQ(v, std::string(1000, 'a'));
  EXPECT_TRUE(dev->Get("missing", &v).IsNotFound());
  EXPECT_TRUE(dev->Exists("key").ok());
  EXPECT_EQ(dev->Count(), 1u);
  EXPECT_TRUE(dev->Remove("key").ok());
  EXPECT_TRUE(dev->Remove("key").IsNotFound());
  EXPECT_EQ(base->Count(), 0u);
  // Rejected by the base engine: no device time.
  EXPECT_TRUE(dev->Put("", "x").IsInvalidArgument());

  EmulatedDeviceStats s = AsDevice(dev)->GetStats();
  // Reads: Get hit, Get miss, Exists, Remove miss. Writes: Put, Remove hit.
  EXPECT_EQ(s.accesses[0], 4u);
  EXPECT_EQ(s.accesses[1], 2u);
  EXPECT_EQ(s.bytes[1], 3u + 1000u + 3u);
  EXPECT_EQ(s.bytes[0], (3u + 1000u) + 7u + 3u + 3u);
  EXPECT_EQ(s.active[0] + s.active[1], 0u);
}

TEST(EmulatedDeviceTest, OneAccessBusiesTheDeviceForItsModelledTransfer) {
  auto base = NewMemoryEngine();
  DeviceProfile p = Load("optane-1dimm");
  auto dev = NewEmulatedDevice(base.get(), p, EmulatedDeviceOptions());
  const std::string value(1 << 20, 'w');
  ASSERT_TRUE(dev->Put("k", value).ok());
  EmulatedDeviceStats s = AsDevice(dev)->GetStats();
  DeviceModel model(p);
  uint64_t bytes = 1 + value.size();
  double transfer = model.ServiceTimeNs(DeviceOp::kWrite, bytes, 1) - model.LatencyNs(DeviceOp::kWrite);
  EXPECT_NEAR(s.busy_ns / transfer, 1.0, 1e-6);
  EXPECT_NEAR(s.accessor_ns / transfer, 1.0, 1e-6);
  EXPECT_NEAR(s.served_bytes[1], model.WorkBytes(DeviceOp::kWrite, bytes), 1e-3);
  EXPECT_GE(s.clock_ns, s.busy_ns);
}

// Concurrent accesses: whatever the interleaving, the accounting must add up: the
// device serves exactly the work of the completed accesses and never counts more
// busy time than has passed.
TEST(EmulatedDeviceTest, ConcurrentAccountingAddsUp) {
  auto base = NewMemoryEngine();
  DeviceProfile p = Load("optane-6dimm");
  auto dev = NewEmulatedDevice(base.get(), p, EmulatedDeviceOptions());
  DeviceModel model(p);
  const int kThreads = 16, kOps = 20;
  auto key_of = [](int t) { return "k" + std::string(t < 10 ? "0" : "") + std::to_string(t); };
  auto value_bytes = [](int t) { return static_cast<size_t>((t + 1) * 4096); };
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string value(value_bytes(t), 'x');
      for (int i = 0; i < kOps; ++i) {
        // Even threads write; odd threads write once, then read their own key.
        Status st = (t % 2 == 0 || i == 0) ? dev->Put(key_of(t), value)
                                           : dev->Get(key_of(t), [](std::string_view) {});
        if (!st.ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  EmulatedDeviceStats s = AsDevice(dev)->GetStats();
  EXPECT_EQ(s.accesses[0] + s.accesses[1], static_cast<uint64_t>(kThreads * kOps));
  EXPECT_EQ(s.active[0] + s.active[1], 0u);
  double work[2] = {0, 0};
  for (int t = 0; t < kThreads; ++t) {
    int writes = t % 2 == 0 ? kOps : 1;
    work[1] += writes * model.WorkBytes(DeviceOp::kWrite, 3 + value_bytes(t));
    work[0] += (kOps - writes) * model.WorkBytes(DeviceOp::kRead, 3 + value_bytes(t));
  }
  EXPECT_NEAR(s.served_bytes[0] / work[0], 1.0, 1e-9);
  EXPECT_NEAR(s.served_bytes[1] / work[1], 1.0, 1e-9);
  EXPECT_LE(s.busy_ns, s.clock_ns);
  EXPECT_GE(s.accessor_ns, s.busy_ns);
}

TEST(EmulatedDeviceTest, NoneProfileIsAPassThrough) {
  auto base = NewMemoryEngine();
  auto dev = NewEmulatedDevice(base.get(), Load("none"), EmulatedDeviceOptions());
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(dev->Put("a", "b").ok());
  std::string v;
  ASSERT_TRUE(base->Get("a", &v).ok());
  EXPECT_EQ(v, "b");
  EmulatedDeviceStats s = AsDevice(dev)->GetStats();
  EXPECT_EQ(s.accesses[0] + s.accesses[1], 0u);
  EXPECT_EQ(s.busy_ns, 0);
}

TEST(EmulatedDeviceTest, InvalidProfileOrBaseGivesNull) {
  auto base = NewMemoryEngine();
  DeviceProfile bad;
  bad.passthrough = false;
  EXPECT_EQ(NewEmulatedDevice(base.get(), bad, EmulatedDeviceOptions()), nullptr);
  EXPECT_EQ(NewEmulatedDevice(nullptr, Load("none"), EmulatedDeviceOptions()), nullptr);
}

TEST(EmulatedDeviceTest, WriteStallsFollowProfileAndOption) {
  auto base = NewMemoryEngine();
  DeviceProfile p = Load("optane-1dimm");
  p.write_stall_probability = 1.0;  // every write stalls (~50 us each)
  for (bool enabled : {true, false}) {
    EmulatedDeviceOptions o;
    o.write_stalls = enabled;
    auto dev = NewEmulatedDevice(base.get(), p, o);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(dev->Put("k", "v").ok());
    ASSERT_TRUE(dev->Get("k", [](std::string_view) {}).ok());
    EXPECT_EQ(AsDevice(dev)->GetStats().write_stalls, enabled ? 5u : 0u);
  }
}

TEST(DeviceBenchTest, RejectsBadOptions) {
  DeviceBenchOptions o;
  DeviceBenchResult r;
  EXPECT_TRUE(RunDeviceBench(Load("none"), o, &r).IsInvalidArgument());
  o.threads = 0;
  EXPECT_TRUE(RunDeviceBench(Load("optane-1dimm"), o, &r).IsInvalidArgument());
  o.threads = 1;
  o.bytes = 0;
  EXPECT_TRUE(RunDeviceBench(Load("optane-1dimm"), o, &r).IsInvalidArgument());
}

// The emulation property the middleware's experiments rest on, measured by running
// real threads: write bandwidth with 24 writers on one DIMM is less than half of the
// best of 1..4 writers. 2 MB writes make the modelled time (1-60 ms per access) dwarf
// the host's own costs. The assertion uses the emulator's accounting over the time the
// device was busy, so idle gaps of a starved host cannot fake or hide the collapse.
// The 24 writers must also really overlap (on average >= 20 in flight while busy); on
// a host so overloaded that they do not, the run is repeated, and after three tries the
// test is skipped as unmeasurable rather than judged. Wall-clock and elapsed-time
// figures are printed for the record.
DeviceBenchResult BenchWriters(const DeviceProfile& p, uint32_t n, uint32_t duration_ms) {
  DeviceBenchOptions o;
  o.op = DeviceOp::kWrite;
  o.bytes = 2 << 20;
  o.threads = n;
  o.warmup_ms = 40;
  o.duration_ms = duration_ms;
  DeviceBenchResult r;
  Status s = RunDeviceBench(p, o, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::cout << "writers=" << n << " busy_GBps=" << r.busy_bandwidth_bytes_per_ns
            << " elapsed_GBps=" << r.emulated_bandwidth_bytes_per_ns
            << " wall_GBps=" << r.wall_bandwidth_bytes_per_ns
            << " mean_active_while_busy=" << r.mean_active_while_busy
            << " mean_active=" << r.mean_active_accessors << "\n";
  return r;
}

TEST(DeviceBenchTest, TwentyFourWritersCollapseBelowHalfThePeak) {
  DeviceProfile p = Load("optane-1dimm");
  double peak = 0;
  for (uint32_t n = 1; n <= 4; ++n) {
    peak = std::max(peak, BenchWriters(p, n, 150).busy_bandwidth_bytes_per_ns);
  }
  DeviceBenchResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = BenchWriters(p, 24, 500);  // each access takes ~60 ms at 24 writers
    if (r.mean_active_while_busy >= 20) break;
  }
  if (r.mean_active_while_busy < 20) {
    GTEST_SKIP() << "host too loaded: the 24 writers did not overlap (mean "
                 << r.mean_active_while_busy << " in flight)";
  }
  RecordProperty("peak_busy_GBps", std::to_string(peak));
  RecordProperty("w24_busy_GBps", std::to_string(r.busy_bandwidth_bytes_per_ns));
  EXPECT_LT(r.busy_bandwidth_bytes_per_ns, 0.5 * peak);
}

}  // namespace
}  // namespace nvmw
