// Key-choice generators of the YCSB-style workload (private): FNV hashing, the Gray et
// al. zipfian generator and YCSB's scrambled-zipfian and skewed-latest variants built on
// it. They draw from the core's seeded generator, nvmw::Rng (src/util/rng.h).
//
// None of these is thread-safe: each client thread owns its own copies.
#ifndef NVMW_WORKLOAD_YCSB_GENERATORS_H_
#define NVMW_WORKLOAD_YCSB_GENERATORS_H_

#include <cstdint>
#include <string>

#include "util/rng.h"

namespace nvmw::ycsb {

// FNV-1a over the 8 bytes of v (little-endian), as YCSB's fnvhash64 intends.
uint64_t FnvHash64(uint64_t v);

// YCSB key of record number `keynum`: "user" followed by the decimal FNV hash.
std::string BuildKey(uint64_t keynum);
// Same, into *out (reuses its buffer: no allocation per operation).
void BuildKey(uint64_t keynum, std::string* out);

// sum_{i=1..n} i^-theta. Exact summation for small n; Euler-Maclaurin beyond
// (relative error < 1e-12), so the 10^10-item space of the scrambled zipfian
// costs microseconds instead of minutes.
double Zeta(uint64_t n, double theta);
// sum_{i=from+1..to} i^-theta (exact; for small growth of an item count).
double ZetaRange(uint64_t from, uint64_t to, double theta);

// Gray et al., "Quickly generating billion-record synthetic databases" (SIGMOD
// 1994): rank 0 is the most popular, P(rank r) ~ 1 / (r+1)^theta. O(1) per draw
// once zeta(n) is known; the item count may grow (inserts) with incremental zeta.
class ZipfianGenerator {
 public:
  // items >= 1. zetan < 0: computed here.
  ZipfianGenerator(uint64_t items, double theta, double zetan = -1);
  // Returns a rank in [0, items).
  uint64_t Next(Rng* rng) const;
  // Extends the item count (no-op if not larger), updating zeta incrementally.
  void Grow(uint64_t items);
  uint64_t items() const { return items_; }
  double zetan() const { return zetan_; }

 private:
  void Derive();
  uint64_t items_;
  double theta_, alpha_, zeta2_, zetan_, eta_, half_pow_theta_;
};

// YCSB's ScrambledZipfianGenerator: draws a zipfian rank over a fixed huge item
// space (10^10) and hashes it into [0, items), so popular keys are spread over
// the whole key space instead of clustering at its start.
class ScrambledZipfianGenerator {
 public:
  static constexpr uint64_t kItemSpace = 10000000000ull;
  ScrambledZipfianGenerator(uint64_t items, double theta);
  // Returns a key number in [0, items).
  uint64_t Next(Rng* rng) const { return FnvHash64(zipf_.Next(rng)) % items_; }
  uint64_t items() const { return items_; }

 private:
  uint64_t items_;
  ZipfianGenerator zipf_;
};

// YCSB's SkewedLatestGenerator: the newest key is the most popular.
class SkewedLatestGenerator {
 public:
  SkewedLatestGenerator(uint64_t items, double theta) : zipf_(items, theta) {}
  // Key number in [0, items) given the current item count (>= construction count).
  uint64_t Next(Rng* rng, uint64_t items) {
    zipf_.Grow(items);
    return items - 1 - zipf_.Next(rng);
  }

 private:
  ZipfianGenerator zipf_;
};

}  // namespace nvmw::ycsb

#endif  // NVMW_WORKLOAD_YCSB_GENERATORS_H_
