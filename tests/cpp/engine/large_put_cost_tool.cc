// What the pieces of an 800 KB Put cost, and what receiving a value straight into the
// pool would cost instead (docs/server.md, "The batch path's CPU per 800 KB SET"):
//
//   xxh3_avx2      the entry checksum over the value (as the Put computes it)
//   nt_copy_drain  the Put's copy: non-temporal copy into the pool, then a drain
//   copy_persist   a copy with ordinary stores (what the kernel's socket receive does
//                  into whatever buffer it is given), then a flush of every line and a
//                  drain: what a value received into the pool would still need
//   copy_only      the ordinary copy alone (the flush is copy_persist minus this)
//
// Sources and destinations rotate over 64 buffers of 800 KB (51 MB, more than the
// caches), so every copy reads its source from memory as a freshly received value
// that another core wrote would be. Rounds alternate the order; medians in us.
//
// Usage: large_put_cost_tool DIR [ROUNDS]   (run with PMEM_IS_PMEM_FORCE=1)
#include <libpmemobj.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace nvmw::engine_internal {
uint64_t Xxh3Avx2(const void* data, size_t n);  // src/engine/entry_checksum_avx2.cc
}

namespace {

constexpr size_t kValue = 800 * 1024;
constexpr size_t kSlots = 64;
constexpr int kOps = 300;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

volatile uint64_t g_sink;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [ROUNDS]\n", argv[0]);
    return 2;
  }
  const std::string path = std::string(argv[1]) + "/large-put-cost.pool";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  std::filesystem::remove(path);
  PMEMobjpool* pop = pmemobj_create(path.c_str(), "large-put-cost", kValue * kSlots + (64ull << 20), 0600);
  if (pop == nullptr) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), pmemobj_errormsg());
    return 1;
  }
  PMEMoid oid;
  if (pmemobj_alloc(pop, &oid, kValue * kSlots + 64, 1, nullptr, nullptr) != 0) {
    std::fprintf(stderr, "alloc: %s\n", pmemobj_errormsg());
    return 1;
  }
  char* raw = static_cast<char*>(pmemobj_direct(oid));
  char* dst = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + 63) & ~uintptr_t{63});
  std::memset(dst, 1, kValue * kSlots);  // every page mapped before timing
  pmemobj_persist(pop, dst, kValue * kSlots);
  std::vector<std::string> src(kSlots, std::string(kValue, 'x'));
  for (size_t s = 0; s < kSlots; ++s) {
    for (size_t i = 0; i < kValue; i += 64) src[s][i] = static_cast<char>(i * 131 + s);
  }

  struct Step {
    const char* name;
    std::function<void(int)> run;
    std::vector<double> us;
  };
  std::vector<Step> steps = {
      {"xxh3_avx2", [&](int i) { g_sink = nvmw::engine_internal::Xxh3Avx2(src[(i * 7) % kSlots].data(), kValue); }, {}},
      {"nt_copy_drain",
       [&](int i) {
         pmemobj_memcpy(pop, dst + (i % kSlots) * kValue, src[(i * 7) % kSlots].data(), kValue,
                        PMEMOBJ_F_MEM_NONTEMPORAL | PMEMOBJ_F_MEM_NODRAIN);
         pmemobj_drain(pop);
       },
       {}},
      {"copy_persist",
       [&](int i) {
         std::memcpy(dst + (i % kSlots) * kValue, src[(i * 7) % kSlots].data(), kValue);
         pmemobj_persist(pop, dst + (i % kSlots) * kValue, kValue);
       },
       {}},
      {"copy_only",
       [&](int i) { std::memcpy(dst + (i % kSlots) * kValue, src[(i * 7) % kSlots].data(), kValue); },
       {}},
  };
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < steps.size(); ++k) {
      Step& st = steps[(r % 2 == 0) ? k : steps.size() - 1 - k];
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kOps; ++i) st.run(i);
      st.us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                      kOps);
    }
  }
  std::printf("{\"value_bytes\": %zu, \"rounds\": %d, \"median_us\": {", kValue, rounds);
  for (size_t k = 0; k < steps.size(); ++k) {
    std::printf("%s\"%s\": %.1f", k ? ", " : "", steps[k].name, Median(steps[k].us));
  }
  std::printf("}}\n");
  pmemobj_free(&oid);
  pmemobj_close(pop);
  std::filesystem::remove(path);
  return 0;
}
