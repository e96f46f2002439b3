// Helpers shared by the engine tests and the crash-test child: temporary pool
// directories on /dev/shm that a killed test does not leave behind, self-describing
// values whose damage is detectable, whole files read and written, and pools of a
// foreign layout.
#ifndef NVMW_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
#define NVMW_TESTS_ENGINE_ENGINE_TEST_UTIL_H_

#include <dirent.h>
#include <fcntl.h>
#include <libpmemobj.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace nvmw::test {

// The lock file of a temporary directory: its process keeps it locked (flock) while the
// directory lives, and the kernel drops the lock when the process dies however it dies
// (SIGKILL, a timeout, a crash). The same protocol as python/nvmw/scratch.py, so that
// either removes the other's stale directories.
inline constexpr char kTempDirOwner[] = ".nvmw-owner";
inline constexpr char kTempDirPrefix[] = "nvmw-";

// Removes every directory base/nvmw-* of this user whose lock file nobody holds, and
// returns how many. A directory without the lock file (another tool's, or one being
// made) and one whose lock is held are left alone; another process removing the same
// directories at once removes each one at most once between them.
inline int RemoveStaleTempDirs(const std::string& base) {
  std::vector<std::string> names;
  if (DIR* d = opendir(base.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, kTempDirPrefix, sizeof(kTempDirPrefix) - 1) == 0) {
        names.emplace_back(e->d_name);
      }
    }
    closedir(d);
  }
  int removed = 0;
  for (const std::string& name : names) {
    const std::string dir = base + "/" + name;
    const std::string owner = dir + "/" + kTempDirOwner;
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    const int fd = open(owner.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not one of these directories, or removed already
    // Locked: its process lives. A lock taken on a file another process has removed
    // meanwhile (the path now names another file, or none) says nothing about the path.
    struct stat locked, now;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &locked) != 0 ||
        lstat(owner.c_str(), &now) != 0 || locked.st_dev != now.st_dev ||
        locked.st_ino != now.st_ino) {
      close(fd);
      continue;
    }
    // The lock file goes last: a removal cut short leaves a directory the next one removes.
    std::vector<std::filesystem::path> entries;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename() != kTempDirOwner) entries.push_back(it->path());
    }
    for (const auto& p : entries) std::filesystem::remove_all(p, ec);
    unlink(owner.c_str());
    if (rmdir(dir.c_str()) == 0) ++removed;
    close(fd);
  }
  return removed;
}

// A fresh directory base/<prefix>XXXXXX (by default under /dev/shm: tmpfs, so pools
// cost RAM, not disk, and run at DRAM speed with PMEM_IS_PMEM_FORCE=1), removed with
// its contents on scope exit. It holds a lock file locked for its life, and making one
// first removes the directories of dead processes (RemoveStaleTempDirs). path() is
// empty when the directory could not be made. `prefix` starts with "nvmw-".
class TempDir {
 public:
  explicit TempDir(const std::string& base = "/dev/shm",
                   const std::string& prefix = "nvmw-engine-test-") {
    RemoveStaleTempDirs(base);
    std::string tmpl = base + "/" + prefix + "XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return;
    // Locked under a temporary name, then renamed: a lock file that can be seen is
    // always one its process locked first.
    const std::string fresh = tmpl + "/" + kTempDirOwner + ".new";
    lock_fd_ = open(fresh.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (lock_fd_ < 0 || flock(lock_fd_, LOCK_EX) != 0 ||
        rename(fresh.c_str(), (tmpl + "/" + kTempDirOwner).c_str()) != 0) {
      std::error_code ec;
      std::filesystem::remove_all(tmpl, ec);
      if (lock_fd_ >= 0) close(lock_fd_);
      lock_fd_ = -1;
      return;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    if (lock_fd_ >= 0) close(lock_fd_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  int lock_fd_ = -1;
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
