// libFuzzer target over damaged pool images: a small valid pmem pool is built once;
// each input is a list of byte patches (offset, bytes) applied to a copy of it.
// The patched pool is opened, every key read, and (for odd first bytes) checked
// with CheckPmemPool. Properties: no crash or hang; a refused open leaves the file
// byte for byte unchanged; a Get that returns OK returns exactly the value that
// was stored (a damaged pool may refuse or quarantine, never lie); check never
// modifies the file.
//
// Run with PMEM_IS_PMEM_FORCE=1 (set and re-executed here if missing).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "engine/engine_test_util.h"
#include "nvmw/engine.h"

namespace {

std::string g_dir, g_pool;
std::string g_pristine;
size_t g_extent = 0;  // patches land in [0, g_extent): the bytes the pool uses
std::map<std::string, std::string> g_values;

std::string ReadAll(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  struct stat st;
  if (fstat(fd, &st) == 0) {
    out.resize(static_cast<size_t>(st.st_size));
    if (pread(fd, out.data(), out.size(), 0) != static_cast<ssize_t>(out.size())) out.clear();
  }
  close(fd);
  return out;
}

void WriteAll(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || pwrite(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) {
    std::abort();
  }
  close(fd);
}

nvmw::PmemOptions Options() {
  nvmw::PmemOptions o;
  o.pool_size_bytes = 8ull << 20;
  o.bucket_count = 16;  // chains of several entries
  o.create_if_missing = false;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (std::getenv("PMEM_IS_PMEM_FORCE") == nullptr) {
    setenv("PMEM_IS_PMEM_FORCE", "1", 1);
    execv("/proc/self/exe", *argv);  // libpmem reads it when it is loaded
  }
  // A directory locked while this process lives (the C++ tests' protocol): removed at
  // exit, and one that a killed run left behind is removed by the next run that makes
  // one (libFuzzer ends runs with _exit on a timeout or a crash, skipping atexit).
  static nvmw::test::TempDir* tmp = new nvmw::test::TempDir("/dev/shm", "nvmw-pool-fuzz-");
  if (tmp->path().empty()) std::abort();
  g_dir = tmp->path();
  g_pool = g_dir + "/pool";
  std::atexit([] { delete tmp; });
  nvmw::PmemOptions o = Options();
  o.create_if_missing = true;
  {
    std::unique_ptr<nvmw::Engine> e;
    if (!nvmw::OpenPmemEngine(g_pool, o, &e).ok()) std::abort();
    for (int i = 0; i < 40; ++i) {
      std::string k = "key-" + std::to_string(i);
      std::string v(i % 10 == 9 ? 5000 + i : 8 + i * 3, static_cast<char>('a' + i % 26));
      v += std::to_string(i);
      if (!e->Put(k, v).ok()) std::abort();
      g_values[k] = v;
    }
    e->Remove("key-3");  // some freed space too
    g_values.erase("key-3");
    e->Put("key-5", "replaced");
    g_values["key-5"] = "replaced";
  }
  g_pristine = ReadAll(g_pool);
  size_t last = g_pristine.find_last_not_of('\0');
  g_extent = last == std::string::npos ? g_pristine.size() : last + 1;
  std::fprintf(stderr, "pool_image_fuzz: %zu-byte pool, %zu bytes in use, %zu keys\n",
               g_pristine.size(), g_extent, g_values.size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Patches: [offset u32][length u8][bytes], offsets wrapped into the used extent;
  // a first bit picks whether CheckPmemPool runs too.
  if (size < 1) return 0;
  const bool check = data[0] & 1;
  std::string image = g_pristine;
  size_t pos = 1;
  for (int n = 0; n < 16 && pos + 5 <= size; ++n) {
    uint32_t off;
    std::memcpy(&off, data + pos, 4);
    size_t len = data[pos + 4] % 16 + 1;
    pos += 5;
    size_t at = off % g_extent;
    for (size_t i = 0; i < len && pos < size && at + i < image.size(); ++i) image[at + i] = data[pos++];
  }
  WriteAll(g_pool, image);

  std::unique_ptr<nvmw::Engine> e;
  nvmw::Status s = nvmw::OpenPmemEngine(g_pool, Options(), &e);
  if (!s.ok()) {
    if (ReadAll(g_pool) != image) {
      std::fprintf(stderr, "refused pool was modified: %s\n", s.ToString().c_str());
      std::abort();
    }
  } else {
    for (const auto& [k, v] : g_values) {
      std::string got;
      nvmw::Status g = e->Get(k, &got);
      if (g.ok() && got != v) {
        std::fprintf(stderr, "wrong value served for %s\n", k.c_str());
        std::abort();
      }
      if (!g.ok() && !g.IsNotFound() && !g.IsCorruption()) std::abort();
    }
    if (e->Count() > g_values.size()) std::abort();
    e.reset();
  }
  if (check) {
    std::string before = ReadAll(g_pool);
    nvmw::PmemCheckOptions co;
    nvmw::PmemCheckReport r;
    nvmw::Status c = nvmw::CheckPmemPool(g_pool, co, &r);
    if (!c.ok() && !c.IsIOError()) std::abort();
    if (ReadAll(g_pool) != before) {
      std::fprintf(stderr, "check modified the pool\n");
      std::abort();
    }
  }
  return 0;
}
