// Helpers shared by the engine implementations: input validation with the same
// messages for every engine, and the key hash that picks lock stripes and buckets.
#ifndef NVMW_ENGINE_ENGINE_UTIL_H_
#define NVMW_ENGINE_ENGINE_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "nvmw/status.h"

namespace nvmw::engine_internal {

// Both engines reject exactly the same inputs, so callers can switch engines
// without their error handling changing.
inline Status CheckKey(std::string_view key, uint64_t max_key_bytes) {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.size() > max_key_bytes) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) +
                                   " bytes exceeds max_key_bytes=" + std::to_string(max_key_bytes));
  }
  return Status::OK();
}

inline Status CheckValue(std::string_view value, uint64_t max_value_bytes) {
  if (value.size() > max_value_bytes) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) +
                                   " bytes exceeds max_value_bytes=" +
                                   std::to_string(max_value_bytes));
  }
  return Status::OK();
}

// 64-bit key hash: 8 bytes per step with a multiply-xorshift mix. Keys are
// short (tens of bytes) on the hot path, so a byte-at-a-time hash (FNV) would
// cost more than the lookup itself. The hash is stored on media by the pmem
// engine, so it must never change for a given layout version.
inline uint64_t HashKey(std::string_view key) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  const char* p = key.data();
  size_t n = key.size();
  uint64_t h = 0x2545F4914F6CDD1Dull ^ (n * kMul);
  auto mix = [](uint64_t x) {
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
  };
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ (w * kMul));
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix(h ^ (w * kMul) ^ (uint64_t{n} << 56));
  }
  return mix(h + kMul);
}

}  // namespace nvmw::engine_internal

#endif  // NVMW_ENGINE_ENGINE_UTIL_H_
