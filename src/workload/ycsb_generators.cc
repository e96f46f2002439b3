// Key-choice generators of the YCSB-style workload.
#include "workload/ycsb_generators.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace nvmw::ycsb {

namespace {

// Below this many terms Zeta sums exactly (a million pow() calls is ~20 ms).
constexpr uint64_t kExactZetaTerms = 1u << 16;
// Euler-Maclaurin split point: terms 1..kSplit-1 summed, the rest integrated.
constexpr uint64_t kSplit = 1u << 12;

}  // namespace

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
}  // namespace nvmw::ycsb
