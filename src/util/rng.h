// Rng: the one seeded pseudo-random generator of the C++ core (synthetic traces, trace
// sampling and shuffles, the replay's value bytes, the YCSB workload's keys and values).
// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014): one add and a multiply-xorshift mix per draw, 64 bits of state, passes
// BigCrush, and is fully specified, so a seed gives the same sequence on every platform
// (unlike the std:: distributions). The synthetic traces, and through them the recorded
// sweeps the simulator is fitted to, depend on its exact output: do not change it.
//
// Thread safety: none; each thread owns its generator.
#ifndef NVMW_UTIL_RNG_H_
#define NVMW_UTIL_RNG_H_

#include <cmath>
#include <cstdint>

namespace nvmw {

class Rng {
 public:
  // The seed is spread first so that small consecutive seeds start far apart.
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 random bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n); n > 0. Scales NextDouble: bias below n / 2^53.
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>(NextDouble() * static_cast<double>(n)) % n; }
  // Exponential with the given mean.
  double Exponential(double mean) { return -mean * std::log1p(-NextDouble()); }

 private:
  uint64_t state_;
};

}  // namespace nvmw

#endif  // NVMW_UTIL_RNG_H_
