// Tests of DeviceModel against the FAST'20 measurements it is built from: the
// bandwidth-vs-threads points (1 and 6 DIMMs), access-size efficiency, idle latency,
// the reader/writer mix, and profile validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device/device_test_util.h"
#include "device/profile_text.h"
#include "nvmw/device.h"

namespace nvmw {
namespace {

using testing::Load;

// A column of a FAST'20 CSV, read independently of the profile.
std::vector<double> Column(const std::string& file, const std::string& column) {
  std::string text;
  EXPECT_TRUE(device::ReadTextFile(testing::Fast20Dir() + "/" + file, &text).ok());
  device::CsvTable t;
  EXPECT_TRUE(t.Parse(text, file).ok());
  std::vector<double> v;
  Status s = t.NumericColumn(column, &v);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return v;
}

constexpr uint64_t kLarge = 2 << 20;  // the access size the thread sweep is reproduced at

struct SweepCase {
  const char* profile;
  const char* file;
  DeviceOp op;
  const char* column;
};

class ThreadSweepTest : public ::testing::TestWithParam<SweepCase> {};

// Every measured point within 5 %: the streaming bandwidth, and the bandwidth implied
// by the service time of one access (latency included) with n accessors.
TEST_P(ThreadSweepTest, ReproducesMeasuredPointsWithin5Percent) {
  const SweepCase& c = GetParam();
  DeviceModel model(Load(c.profile));
  std::vector<double> threads = Column(c.file, "Threads");
  std::vector<double> measured = Column(c.file, c.column);
  ASSERT_EQ(threads.size(), 24u);
  for (size_t i = 0; i < threads.size(); ++i) {
    uint32_t n = static_cast<uint32_t>(threads[i]);
    double bw = model.BandwidthBytesPerNs(c.op, n, kLarge);
    EXPECT_NEAR(bw / measured[i], 1.0, 0.05) << c.profile << " n=" << n;
    double from_time = n * static_cast<double>(kLarge) / model.ServiceTimeNs(c.op, kLarge, n);
    EXPECT_NEAR(from_time / measured[i], 1.0, 0.05) << c.profile << " n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fast20, ThreadSweepTest,
    ::testing::Values(
        SweepCase{"optane-1dimm", "04-bandwidth_thcount_optane_ni.csv", DeviceOp::kRead, "Read"},
        SweepCase{"optane-1dimm", "04-bandwidth_thcount_optane_ni.csv", DeviceOp::kWrite,
                  "Write(ntstore)"},
        SweepCase{"optane-6dimm", "04-bandwidth_thcount_optane.csv", DeviceOp::kRead, "Read"},
        // Swapped header in this file: ntstore figures sit under "Write(clwb)".
        SweepCase{"optane-6dimm", "04-bandwidth_thcount_optane.csv", DeviceOp::kWrite,
                  "Write(clwb)"}));

TEST(DeviceModelTest, WriteBandwidthCollapsesUnderContention) {
  DeviceModel model(Load("optane-1dimm"));
  double peak = 0;
  for (uint32_t n = 1; n <= 4; ++n) {
    peak = std::max(peak, model.BandwidthBytesPerNs(DeviceOp::kWrite, n, kLarge));
  }
  EXPECT_LT(model.BandwidthBytesPerNs(DeviceOp::kWrite, 24, kLarge), 0.5 * peak);
  // Beyond the measured 24 threads the last point holds.
  EXPECT_DOUBLE_EQ(model.BandwidthBytesPerNs(DeviceOp::kWrite, 200, kLarge),
                   model.BandwidthBytesPerNs(DeviceOp::kWrite, 24, kLarge));
}

TEST(DeviceModelTest, SmallAccessesWasteBandwidth) {
  DeviceModel model(Load("optane-1dimm"));
  std::vector<double> sizes = Column("05-bandwidth_accesssize_optane_ni.csv", "AccessSize");
  std::vector<double> writes = Column("05-bandwidth_accesssize_optane_ni.csv", "Write(ntstore)");
  std::vector<double> reads = Column("05-bandwidth_accesssize_optane_ni.csv", "Read");
  double ref_w = model.BandwidthBytesPerNs(DeviceOp::kWrite, 1, kLarge);
  double ref_r = model.BandwidthBytesPerNs(DeviceOp::kRead, 1, kLarge);
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint64_t s = static_cast<uint64_t>(sizes[i]);
    EXPECT_NEAR(model.BandwidthBytesPerNs(DeviceOp::kWrite, 1, s) / ref_w,
                writes[i] / writes.back(), 0.01) << s;
    EXPECT_NEAR(model.BandwidthBytesPerNs(DeviceOp::kRead, 1, s) / ref_r,
                reads[i] / reads.back(), 0.01) << s;
  }
  // 64 B moves about a quarter of what 256 B does: the media line is 256 B.
  double r64 = model.BandwidthBytesPerNs(DeviceOp::kWrite, 4, 64) /
               model.BandwidthBytesPerNs(DeviceOp::kWrite, 4, 256);
  EXPECT_NEAR(r64, 0.25, 0.02);
  // Below the smallest measured size an access costs as much as that size.
  EXPECT_DOUBLE_EQ(model.ServiceTimeNs(DeviceOp::kWrite, 30, 1),
                   model.ServiceTimeNs(DeviceOp::kWrite, 64, 1));
  EXPECT_GT(model.ServiceTimeNs(DeviceOp::kWrite, 30, 8),
            model.ServiceTimeNs(DeviceOp::kWrite, 30, 1));
}

TEST(DeviceModelTest, IdleLatencyComesFromTheData) {
  DeviceProfile p = Load("optane-1dimm");
  std::string text;
  ASSERT_TRUE(device::ReadTextFile(testing::Fast20Dir() + "/02-best_case_latency.csv", &text).ok());
  device::CsvTable t;
  ASSERT_TRUE(t.Parse(text, "02").ok());
  double read_ns = 0, write_ns = 0;
  ASSERT_TRUE(t.Cell("Read\\Random", "Optane", &read_ns).ok());
  ASSERT_TRUE(t.Cell("Write\\(ntstore)", "Optane", &write_ns).ok());
  DeviceModel model(p);
  EXPECT_DOUBLE_EQ(model.LatencyNs(DeviceOp::kRead), read_ns);
  EXPECT_DOUBLE_EQ(model.LatencyNs(DeviceOp::kWrite), write_ns);
  // A tiny access at no contention is dominated by that latency.
  double t64 = model.ServiceTimeNs(DeviceOp::kRead, 64, 1);
  EXPECT_GT(t64, read_ns);
  EXPECT_LT(t64, 2 * read_ns);
}

TEST(DeviceModelTest, MixFactorReproducesTheReaderWriterSweep) {
  DeviceProfile p = Load("optane-1dimm");
  ASSERT_FALSE(p.mix_factor.empty());
  EXPECT_DOUBLE_EQ(p.mix_factor.At(0), 1.0);
  EXPECT_DOUBLE_EQ(p.mix_factor.At(1), 1.0);
  // 06-bandwidth_thmix.csv: 8 readers + 8 writers vs 16-0 and 0-16.
  std::vector<double> bw = Column("06-bandwidth_thmix.csv", "PM-Optane");
  double pure_write = bw.front(), half = bw[4], pure_read = bw.back();
  EXPECT_NEAR(p.mix_factor.At(0.5), half / (0.5 * pure_read + 0.5 * pure_write), 1e-9);
  // In the model the aggregate of a mix is the factor times the thread-weighted blend.
  DeviceModel model(p);
  double mixed = 8 * model.RatePerAccessor(DeviceOp::kRead, 8, 8) +
                 8 * model.RatePerAccessor(DeviceOp::kWrite, 8, 8);
  double blend = 0.5 * p.read_bandwidth.At(16) + 0.5 * p.write_bandwidth.At(16);
  EXPECT_NEAR(mixed / blend, p.mix_factor.At(0.5), 1e-9);
}

TEST(DeviceModelTest, NoneIsPassthrough) {
  DeviceProfile p = Load("none");
  EXPECT_TRUE(p.passthrough);
  DeviceModel model(p);
  EXPECT_EQ(model.ServiceTimeNs(DeviceOp::kWrite, 1 << 20, 24), 0);
}

TEST(DeviceModelTest, StallMagnitudeFromTailData) {
  DeviceProfile p = Load("optane-1dimm");
  std::vector<double> regions = Column("03-tail_latency.csv", "HotspotRegion");
  std::vector<double> p99999 = Column("03-tail_latency.csv", "99.999%");
  size_t i = std::find(regions.begin(), regions.end(), 4096.0) - regions.begin();
  ASSERT_LT(i, regions.size());
  EXPECT_DOUBLE_EQ(p.write_stall_ns, p99999[i] * 1000);
  EXPECT_EQ(p.write_stall_probability, 0.0);  // off unless asked for
}

TEST(DeviceCurveTest, ClampsAtTheEndsAndNaNToTheFirstPoint) {
  DeviceCurve c;
  c.x = {1, 2, 4};
  c.y = {10, 20, 40};
  EXPECT_DOUBLE_EQ(c.At(0), 10);
  EXPECT_DOUBLE_EQ(c.At(3), 30);
  EXPECT_DOUBLE_EQ(c.At(9), 40);
  // A NaN once passed both end checks and was searched for, which ran past the end.
  EXPECT_DOUBLE_EQ(c.At(std::nan("")), 10);
}

TEST(ValidateDeviceProfileTest, RejectsBrokenCurves) {
  DeviceProfile good = Load("optane-1dimm");
  ASSERT_TRUE(ValidateDeviceProfile(good).ok());
  DeviceProfile p = good;
  p.read_bandwidth.y.pop_back();
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.write_bandwidth.x[3] = p.write_bandwidth.x[2];
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.write_bandwidth = DeviceCurve();
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.read_size_efficiency.y[0] = 0;
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.mix_factor.x.back() = 1.5;
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.read_latency_ns = -1;
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  p = good;
  p.write_stall_probability = 1.5;
  EXPECT_TRUE(ValidateDeviceProfile(p).IsInvalidArgument());
  DeviceProfile empty;
  empty.passthrough = false;
  EXPECT_TRUE(ValidateDeviceProfile(empty).IsInvalidArgument());
}

}  // namespace
}  // namespace nvmw
