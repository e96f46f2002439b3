// Shared helpers of the device tests: where the profile data lives (found from this
// file's path, so the tests run from any build directory), and loading a profile.
#ifndef NVMW_TESTS_DEVICE_TEST_UTIL_H_
#define NVMW_TESTS_DEVICE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "nvmw/device.h"

namespace nvmw::testing {

inline std::string SourceRoot() {
  std::string here = __FILE__;  // <root>/tests/cpp/device/device_test_util.h
  for (int i = 0; i < 4; ++i) here = here.substr(0, here.find_last_of('/'));
  return here;
}

inline std::string DevicesDir() { return SourceRoot() + "/python/nvmw/data/devices"; }
inline std::string Fast20Dir() { return SourceRoot() + "/python/nvmw/data/optane-fast20"; }

// The named profile from DevicesDir(); a load failure fails the calling test.
inline DeviceProfile Load(const std::string& name) {
  DeviceProfile p;
  Status s = LoadDeviceProfile(DevicesDir(), name, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_DEVICE_TEST_UTIL_H_
