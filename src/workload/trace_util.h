// Private helpers shared by the trace files: a stable string hash and text helpers for
// the CSV readers. (Their seeded generator is nvmw::Rng, src/util/rng.h.)
#ifndef NVMW_WORKLOAD_TRACE_UTIL_H_
#define NVMW_WORKLOAD_TRACE_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace nvmw::trace_internal {

// FNV-1a over the bytes, then a final mix; stable across runs and platforms.
inline uint64_t StableHash(std::string_view s, uint64_t seed = 0) {
  uint64_t h = 0xCBF29CE484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

// n characters of [0-9a-z] drawn from h (re-mixed as needed).
inline std::string Base36(uint64_t h, int n) {
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out(n, '0');
  for (int i = 0; i < n; ++i) {
    if (i % 12 == 11) h = StableHash(std::string_view(out.data(), i), h);
    out[i] = kDigits[h % 36];
    h /= 36;
  }
  return out;
}

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

}  // namespace nvmw::trace_internal

#endif  // NVMW_WORKLOAD_TRACE_UTIL_H_
