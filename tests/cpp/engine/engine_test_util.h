// Helpers shared by the engine tests and the crash-test child: temporary pool
// directories on /dev/shm, self-describing values whose damage is detectable, whole
// files read and written, and pools of a foreign layout.
#ifndef NVMW_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
#define NVMW_TESTS_ENGINE_ENGINE_TEST_UTIL_H_

#include <libpmemobj.h>
#include <stdlib.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace nvmw::test {

// A fresh directory under /dev/shm (tmpfs: pools cost RAM, not disk, and run at
// DRAM speed with PMEM_IS_PMEM_FORCE=1), removed with its contents on scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/dev/shm/nvmw-engine-test-XXXXXX";
    char* p = mkdtemp(tmpl);
    path_ = p != nullptr ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Creates a valid libpmemobj pool of the smallest size whose layout name is
// `layout` (another program's, or another nvmw format's). False when libpmemobj
// refuses; pmemobj_errormsg() says why.
inline bool CreatePoolWithLayout(const std::string& path, const char* layout, mode_t mode) {
  PMEMobjpool* pop = pmemobj_create(path.c_str(), layout, PMEMOBJ_MIN_POOL, mode);
  if (pop == nullptr) return false;
  pmemobj_close(pop);
  return true;
}

inline uint64_t Fnv1a(std::string_view data, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Checksum over whole values, 8 bytes per step so that multi-MB values in the
// crash test cost far less than the Put they guard (independent of the
// engine's own key hash on purpose).
inline uint64_t Checksum(std::string_view data) {
  uint64_t h = 0x84222325cbf29ce4ull ^ data.size();
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, data.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (; i < data.size(); ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

// A value that describes itself: [len u64][version u64][key hash u64] payload
// [checksum u64]. The payload is derived from (key, version), and the checksum
// covers everything before it, so a torn, stale-mixed or misplaced value fails
// CheckValue. Values shorter than 32 bytes cannot carry the header; callers use
// at least 32.
constexpr size_t kMinSelfDescribing = 32;

inline std::string MakeValue(std::string_view key, uint64_t version, size_t len) {
  if (len < kMinSelfDescribing) len = kMinSelfDescribing;
  std::string v(len, '\0');
  uint64_t kh = Fnv1a(key);
  std::memcpy(v.data(), &len, 8);
  std::memcpy(v.data() + 8, &version, 8);
  std::memcpy(v.data() + 16, &kh, 8);
  // Cheap pseudo-random payload: xorshift seeded by key and version.
  uint64_t x = kh ^ (version * 0x9E3779B97F4A7C15ull) ^ 1;
  size_t i = 24;
  for (; i + 8 <= len - 8; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < len - 8; ++i) v[i] = static_cast<char>(x >> (i % 8));
  uint64_t sum = Checksum(std::string_view(v.data(), len - 8));
  std::memcpy(v.data() + len - 8, &sum, 8);
  return v;
}

// True when `v` is an intact value made by MakeValue for `key`; *version gets
// its version.
inline bool CheckValue(std::string_view key, std::string_view v, uint64_t* version) {
  if (v.size() < kMinSelfDescribing) return false;
  uint64_t len, ver, kh, sum;
  std::memcpy(&len, v.data(), 8);
  std::memcpy(&ver, v.data() + 8, 8);
  std::memcpy(&kh, v.data() + 16, 8);
  std::memcpy(&sum, v.data() + v.size() - 8, 8);
  if (len != v.size() || kh != Fnv1a(key)) return false;
  if (sum != Checksum(v.substr(0, v.size() - 8))) return false;
  if (version != nullptr) *version = ver;
  return true;
}

}  // namespace nvmw::test

#endif  // NVMW_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
