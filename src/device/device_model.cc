// DeviceModel: service time and bandwidth of an access from a DeviceProfile's curves.
// Equations and the reasons behind them are in docs/device.md.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

#include "nvmw/device.h"

namespace nvmw {

const char* DeviceOpName(DeviceOp op) { return op == DeviceOp::kRead ? "read" : "write"; }

double DeviceCurve::At(double at) const {
  if (x.empty()) return 1.0;
  if (!(at > x.front())) return y.front();  // NaN too: never search with it
  if (at >= x.back()) return y.back();
  auto it = std::upper_bound(x.begin(), x.end(), at);
  size_t hi = static_cast<size_t>(it - x.begin());
  size_t lo = hi - 1;
  double f = (at - x[lo]) / (x[hi] - x[lo]);
  return y[lo] + f * (y[hi] - y[lo]);
}

namespace {

Status CheckCurve(const DeviceCurve& c, const char* what, bool required, double min_x,
                  double max_x) {
  std::string name(what);
  if (c.x.empty() && c.y.empty()) {
    if (required) return Status::InvalidArgument(name + ": curve is empty");
    return Status::OK();
  }
  if (c.x.size() != c.y.size()) {
    return Status::InvalidArgument(name + ": " + std::to_string(c.x.size()) + " x values but " +
                                   std::to_string(c.y.size()) + " y values");
  }
  for (size_t i = 0; i < c.x.size(); ++i) {
    if (!std::isfinite(c.x[i]) || !std::isfinite(c.y[i])) {
      return Status::InvalidArgument(name + ": non-finite point " + std::to_string(i));
    }
    if (c.y[i] <= 0) {
      return Status::InvalidArgument(name + ": y must be > 0 (point " + std::to_string(i) +
                                     " is " + std::to_string(c.y[i]) + ")");
    }
    if (c.x[i] < min_x || c.x[i] > max_x) {
      return Status::InvalidArgument(name + ": x = " + std::to_string(c.x[i]) +
                                     " outside [" + std::to_string(min_x) + ", " +
                                     std::to_string(max_x) + "]");
    }
    if (i > 0 && !(c.x[i] > c.x[i - 1])) {
      return Status::InvalidArgument(name + ": x must be strictly increasing (point " +
                                     std::to_string(i) + ")");
    }
  }
  return Status::OK();
}

}  // namespace

Status ValidateDeviceProfile(const DeviceProfile& p) {
  if (p.passthrough) return Status::OK();
  const std::string who = "device profile '" + p.name + "': ";
  auto wrap = [&](Status s) { return s.ok() ? s : Status::InvalidArgument(who + s.message()); };
  if (!(p.read_latency_ns >= 0) || !(p.write_latency_ns >= 0) ||
      !std::isfinite(p.read_latency_ns) || !std::isfinite(p.write_latency_ns)) {
    return Status::InvalidArgument(who + "latencies must be finite and >= 0");
  }
  const double kHuge = 1e300;
  Status s;
  if (!(s = CheckCurve(p.read_bandwidth, "read_bandwidth", true, 0, kHuge)).ok()) return wrap(s);
  if (!(s = CheckCurve(p.write_bandwidth, "write_bandwidth", true, 0, kHuge)).ok()) return wrap(s);
  if (!(s = CheckCurve(p.read_size_efficiency, "read_size_efficiency", false, 0, kHuge)).ok())
    return wrap(s);
  if (!(s = CheckCurve(p.write_size_efficiency, "write_size_efficiency", false, 0, kHuge)).ok())
    return wrap(s);
  if (!(s = CheckCurve(p.mix_factor, "mix_factor", false, 0, 1)).ok()) return wrap(s);
  if (!(p.write_stall_ns >= 0) || !std::isfinite(p.write_stall_ns)) {
    return Status::InvalidArgument(who + "write_stall_ns must be finite and >= 0");
  }
  if (!(p.write_stall_probability >= 0 && p.write_stall_probability <= 1)) {
    return Status::InvalidArgument(who + "write_stall_probability must be in [0, 1]");
  }
  return Status::OK();
}

DeviceModel::DeviceModel(const DeviceProfile& profile) : profile_(profile) {
  assert(ValidateDeviceProfile(profile_).ok());
}

double DeviceModel::LatencyNs(DeviceOp op) const {
  if (profile_.passthrough) return 0;
  return op == DeviceOp::kRead ? profile_.read_latency_ns : profile_.write_latency_ns;
}

double DeviceModel::WorkBytes(DeviceOp op, uint64_t bytes) const {
  const DeviceCurve& eff =
      op == DeviceOp::kRead ? profile_.read_size_efficiency : profile_.write_size_efficiency;
  if (eff.empty()) return static_cast<double>(bytes);
  // The device moves whole lines: an access smaller than the smallest measured size
  // costs as much as one of that size.
  double b = std::max(static_cast<double>(bytes), eff.x.front());
  return b / eff.At(b);
}

double DeviceModel::RatePerAccessor(DeviceOp op, uint32_t readers, uint32_t writers) const {
  uint32_t n = readers + writers;
  if (n == 0) {
    n = 1;
    (op == DeviceOp::kRead ? readers : writers) = 1;
  }
  const DeviceCurve& bw =
      op == DeviceOp::kRead ? profile_.read_bandwidth : profile_.write_bandwidth;
  double mix = profile_.mix_factor.At(static_cast<double>(writers) / n);
  return mix * bw.At(n) / n;
}

double DeviceModel::BandwidthBytesPerNs(DeviceOp op, uint32_t accessors, uint64_t bytes) const {
  if (profile_.passthrough) return HUGE_VAL;
  if (accessors == 0) return 0;
  const DeviceCurve& bw =
      op == DeviceOp::kRead ? profile_.read_bandwidth : profile_.write_bandwidth;
  double work = WorkBytes(op, bytes);
  double useful = work > 0 ? static_cast<double>(bytes) / work : 1.0;
  return bw.At(accessors) * useful;
}

double DeviceModel::ServiceTimeNs(DeviceOp op, uint64_t bytes, uint32_t readers,
                                  uint32_t writers) const {
  if (profile_.passthrough) return 0;
  return LatencyNs(op) + WorkBytes(op, bytes) / RatePerAccessor(op, readers, writers);
}

double DeviceModel::ServiceTimeNs(DeviceOp op, uint64_t bytes, uint32_t accessors) const {
  return op == DeviceOp::kRead ? ServiceTimeNs(op, bytes, accessors, 0)
                               : ServiceTimeNs(op, bytes, 0, accessors);
}

}  // namespace nvmw
