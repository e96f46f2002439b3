// What the model-based tests share: the seeds and lengths a run uses (fixed by default,
// NVMW_MODEL_SEEDS and NVMW_MODEL_OPS for longer hunts by hand) and a generator whose
// sequence a seed names on every standard library.
#ifndef NVMW_TESTS_MODEL_TEST_UTIL_H_
#define NVMW_TESTS_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace nvmw::testing {

// The seeds NVMW_MODEL_SEEDS names ("1-500", "7,12,40-60"; reading stops at the first
// word that is not a number), else `defaults`.
inline std::vector<uint64_t> ModelSeeds(std::vector<uint64_t> defaults) {
  const char* env = std::getenv("NVMW_MODEL_SEEDS");
  if (env == nullptr || *env == '\0') return defaults;
  std::vector<uint64_t> seeds;
  const char* p = env;
  while (*p != '\0') {
    char* end = nullptr;
    const uint64_t lo = std::strtoull(p, &end, 10);
    if (end == p) break;
    uint64_t hi = lo;
    if (*end == '-') hi = std::strtoull(end + 1, &end, 10);
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
    p = *end == ',' ? end + 1 : end;
  }
  return seeds;
}

// Operations per seed: NVMW_MODEL_OPS, else `fallback`.
inline int ModelOps(int fallback) {
  const char* env = std::getenv("NVMW_MODEL_OPS");
  return env != nullptr && *env != '\0' ? std::atoi(env) : fallback;
}

// splitmix64: the standard distributions' outputs differ between library
// implementations, and a seed must name one sequence.
class ModelRng {
 public:
  explicit ModelRng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }                        // [0, n)
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }  // [lo, hi]
  bool Percent(int p) { return static_cast<int>(Below(100)) < p; }
  bool OneIn(uint64_t n) { return Below(n) == 0; }

 private:
  uint64_t s_;
};

}  // namespace nvmw::testing

#endif  // NVMW_TESTS_MODEL_TEST_UTIL_H_
