// Key-choice generators and the latency histogram of the YCSB-style workload.
#include "workload/ycsb_generators.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

namespace nvmw::ycsb {

namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Below this many terms Zeta sums exactly (a million pow() calls is ~20 ms).
constexpr uint64_t kExactZetaTerms = 1u << 16;
// Euler-Maclaurin split point: terms 1..kSplit-1 summed, the rest integrated.
constexpr uint64_t kSplit = 1u << 12;

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = SplitMix64(&x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t FnvHash64(uint64_t v) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    hash ^= v & 0xff;
    hash *= 0x100000001b3ull;
    v >>= 8;
  }
  return hash;
}

void BuildKey(uint64_t keynum, std::string* out) {
  char digits[24];
  const auto res = std::to_chars(digits, digits + sizeof(digits), FnvHash64(keynum));
  out->assign("user");
  out->append(digits, res.ptr);
}

std::string BuildKey(uint64_t keynum) {
  std::string key;
  BuildKey(keynum, &key);
  return key;
}

double ZetaRange(uint64_t from, uint64_t to, double theta) {
  double sum = 0;
  for (uint64_t i = from + 1; i <= to; ++i) sum += std::pow(static_cast<double>(i), -theta);
  return sum;
}

double Zeta(uint64_t n, double theta) {
  if (n <= kExactZetaTerms) return ZetaRange(0, n, theta);
  // Euler-Maclaurin: sum_{i=M}^{n} f(i) = integral_M^n f + (f(M)+f(n))/2
  //   + (f'(n)-f'(M))/12 - (f'''(n)-f'''(M))/720 + ..., with f(x) = x^-theta.
  const double m = static_cast<double>(kSplit), x = static_cast<double>(n);
  const double head = ZetaRange(0, kSplit - 1, theta);
  const double integral = std::abs(theta - 1) < 1e-12
                              ? std::log(x / m)
                              : (std::pow(x, 1 - theta) - std::pow(m, 1 - theta)) / (1 - theta);
  auto f = [theta](double v) { return std::pow(v, -theta); };
  auto f1 = [theta](double v) { return -theta * std::pow(v, -theta - 1); };
  auto f3 = [theta](double v) {
    return -theta * (theta + 1) * (theta + 2) * std::pow(v, -theta - 3);
  };
  return head + integral + (f(m) + f(x)) / 2 + (f1(x) - f1(m)) / 12 - (f3(x) - f3(m)) / 720;
}

ZipfianGenerator::ZipfianGenerator(uint64_t items, double theta, double zetan)
    : items_(std::max<uint64_t>(items, 1)), theta_(theta) {
  zeta2_ = Zeta(2, theta_);
  zetan_ = zetan >= 0 ? zetan : Zeta(items_, theta_);
  alpha_ = 1.0 / (1.0 - theta_);
  half_pow_theta_ = 1.0 + std::pow(0.5, theta_);
  Derive();
}

void ZipfianGenerator::Derive() {
  eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / (1 - zeta2_ / zetan_);
}

void ZipfianGenerator::Grow(uint64_t items) {
  if (items <= items_) return;
  // Inserts grow the count by a few at a time: add the new terms only.
  zetan_ = items - items_ > kExactZetaTerms ? Zeta(items, theta_)
                                            : zetan_ + ZetaRange(items_, items, theta_);
  items_ = items;
  Derive();
}

uint64_t ZipfianGenerator::Next(Rng* rng) const {
  const double u = rng->NextDouble();
  const double uz = u * zetan_;
  // The first two ranks are placed exactly; the rest follow the continuous
  // approximation of the inverse CDF.
  if (uz < 1.0) return 0;
  if (uz < half_pow_theta_) return items_ > 1 ? 1 : 0;
  const uint64_t r = static_cast<uint64_t>(
      static_cast<double>(items_) * std::pow(eta_ * u - eta_ + 1, alpha_));
  return std::min(r, items_ - 1);
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t items, double theta)
    : items_(std::max<uint64_t>(items, 1)), zipf_(kItemSpace, theta) {}

LatencyHistogram::LatencyHistogram() { std::memset(counts_, 0, sizeof(counts_)); }

int LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < static_cast<uint64_t>(kSub)) return static_cast<int>(ns);
  int e = 63 - std::countl_zero(ns);
  if (e > kMaxExp) return kBuckets - 1;
  const int sub = static_cast<int>((ns >> (e - kSubBits)) & (kSub - 1));
  return kSub + (e - kSubBits) * kSub + sub;
}

double LatencyHistogram::BucketMid(int bucket) {
  if (bucket < kSub) return bucket;
  const int e = (bucket - kSub) / kSub + kSubBits;
  const int sub = (bucket - kSub) % kSub;
  const double width = std::ldexp(1.0, e - kSubBits);
  const double low = (kSub + sub) * width;
  return low + (width - 1) / 2;
}

void LatencyHistogram::Add(uint64_t ns) {
  ++counts_[BucketOf(ns)];
  ++count_;
  sum_ += ns;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

double LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  if (rank >= count_) return static_cast<double>(max_);  // the largest sample is exact
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      // Never report outside the exact observed range.
      return std::clamp(BucketMid(i), static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

}  // namespace nvmw::ycsb
