// Tests of the log-linear histogram: bucket layout, exact moments, and percentiles
// within 1 % of the exact nearest-rank percentiles of known sample sets.
#include "util/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace nvmw {
namespace {

double ExactPercentile(std::vector<uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]);
}

void ExpectPercentilesWithin1Percent(const std::vector<uint64_t>& samples) {
  Histogram h;
  for (uint64_t v : samples) h.Record(v);
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    const double exact = ExactPercentile(samples, p);
    const double got = h.Percentile(p);
    EXPECT_LE(std::fabs(got - exact), 0.01 * exact + 1e-9) << "p" << p << " exact " << exact;
  }
}

TEST(HistogramTest, BucketLayoutIsContiguousAndNarrow) {
  // Every bucket starts right after the previous one ends, and is at most 1/128 of its
  // lower bound wide (above the exact range).
  uint64_t expected_low = 0;
  for (int i = 0; i < Histogram::kNumBuckets; ++i) {
    const uint64_t low = Histogram::BucketLow(i);
    const uint64_t high = Histogram::BucketHigh(i);
    ASSERT_EQ(low, expected_low) << i;
    ASSERT_GE(high, low);
    ASSERT_EQ(Histogram::BucketIndex(low), i);
    ASSERT_EQ(Histogram::BucketIndex(high), i);
    if (low >= Histogram::kSub) {
      ASSERT_LE(static_cast<double>(high - low + 1), static_cast<double>(low) / 128.0 + 1e-9) << i;
    }
    expected_low = high + 1;
    if (i == Histogram::kNumBuckets - 1) {
      EXPECT_EQ(high, UINT64_MAX);
    }
  }
}

TEST(HistogramTest, EmptyHistogram) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(99), 0.0);
  EXPECT_EQ(h.Mean(), 0.0);
  EXPECT_EQ(h.StdDev(), 0.0);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.min(), 0u);
}

TEST(HistogramTest, ExactMoments) {
  Histogram h;
  const std::vector<uint64_t> v = {2, 4, 4, 4, 5, 5, 7, 9};  // mean 5, population std 2
  for (uint64_t x : v) h.Record(x);
  EXPECT_EQ(h.count(), 8u);
  EXPECT_EQ(h.sum(), 40u);
  EXPECT_DOUBLE_EQ(h.Mean(), 5.0);
  EXPECT_DOUBLE_EQ(h.StdDev(), 2.0);
  EXPECT_EQ(h.min(), 2u);
  EXPECT_EQ(h.max(), 9u);
  // Small values have exact buckets.
  EXPECT_EQ(h.Percentile(50), 4.0);
  EXPECT_EQ(h.Percentile(100), 9.0);
}

TEST(HistogramTest, LargeValuesKeepExactMoments) {
  Histogram h;
  const uint64_t big = uint64_t{1} << 40;  // ~18 minutes in ns
  h.Record(big);
  h.Record(big + 2);
  EXPECT_EQ(h.max(), big + 2);
  EXPECT_DOUBLE_EQ(h.Mean(), static_cast<double>(big + 1));
  EXPECT_DOUBLE_EQ(h.StdDev(), 1.0);
  EXPECT_LE(h.Percentile(100), static_cast<double>(big + 2));
}

TEST(HistogramTest, UniformPercentilesWithin1Percent) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint64_t> dist(1000, 1000000);
  std::vector<uint64_t> v(200000);
  for (auto& x : v) x = dist(rng);
  ExpectPercentilesWithin1Percent(v);
}

TEST(HistogramTest, LogNormalLatenciesWithin1Percent) {
  // Latency-like: ~20 us median with a long tail.
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> dist(std::log(20000.0), 1.0);
  std::vector<uint64_t> v(300000);
  for (auto& x : v) x = static_cast<uint64_t>(dist(rng));
  ExpectPercentilesWithin1Percent(v);
}

TEST(HistogramTest, BimodalWithin1Percent) {
  // 98.5 % fast (~2 us), 1.5 % slow (~5 ms): p99 and p99.9 fall in the slow mode.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> fast(2000, 200), slow(5e6, 5e5);
  std::bernoulli_distribution is_slow(0.015);
  std::vector<uint64_t> v(100000);
  for (auto& x : v) x = static_cast<uint64_t>(std::max(1.0, is_slow(rng) ? slow(rng) : fast(rng)));
  ExpectPercentilesWithin1Percent(v);
}

TEST(HistogramTest, MergeEqualsRecordingEverything) {
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<uint64_t> dist(0, 1u << 24);
  Histogram a, b, all;
  for (int i = 0; i < 50000; ++i) {
    const uint64_t x = dist(rng);
    (i % 3 ? a : b).Record(x);
    all.Record(x);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.sum(), all.sum());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_DOUBLE_EQ(a.StdDev(), all.StdDev());
  for (double p : {1.0, 50.0, 99.0, 99.9}) EXPECT_EQ(a.Percentile(p), all.Percentile(p));
}

TEST(HistogramTest, ClearForgetsEverything) {
  Histogram h;
  for (uint64_t x = 1; x < 100000; x += 7) h.Record(x);
  h.Clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max(), 0u);
  h.Record(300);
  EXPECT_EQ(h.count(), 1u);
  EXPECT_EQ(h.Percentile(50), 300.0);  // clamped to [min, max]
  EXPECT_EQ(h.min(), 300u);
}

TEST(HistogramTest, ArithmeticSeriesAndExactExtremes) {
  // (Formerly the YCSB workload's own histogram test; same assertions, p in [0, 100].)
  Histogram h;
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v * 37);
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_NEAR(h.Percentile(50), 50000 * 37.0, 0.01 * 50000 * 37);
  EXPECT_NEAR(h.Percentile(99), 99000 * 37.0, 0.01 * 99000 * 37);
  EXPECT_NEAR(h.Mean(), 50000.5 * 37, 1e-6);
  EXPECT_EQ(h.min(), 37u);
  EXPECT_EQ(h.max(), 3700000u);
  // The largest and smallest samples are known exactly, not as a bucket midpoint.
  EXPECT_EQ(h.Percentile(100), 3700000.0);
  EXPECT_EQ(h.Percentile(0), 37.0);
  Histogram empty;
  EXPECT_EQ(empty.Percentile(99), 0);
  h.Merge(empty);
  EXPECT_EQ(h.count(), 100000u);
}

TEST(HistogramTest, RankOfTheMaxIsExactInSmallSamples) {
  // 50 samples: p99 is rank ceil(49.5) = 50, the largest sample, reported exactly even
  // though its bucket (above 128) is wider than one.
  Histogram h;
  for (uint64_t v = 1; v <= 50; ++v) h.Record(1000 + v * 13);
  EXPECT_EQ(h.Percentile(99), 1650.0);
  EXPECT_EQ(h.Percentile(2), 1013.0);  // rank 1: the smallest
  // Rank 25 is 1325 (bucket 1320-1327 at this magnitude): the midpoint, within 0.4 %.
  EXPECT_NEAR(h.Percentile(50), 1325.0, 1325.0 * 0.004);
}

TEST(HistogramTest, MergeIntoEmptyAndLargeAfterSmall) {
  // Buckets are allocated up to the largest value seen: merging a histogram with larger
  // values into one with only small values (or none) must still count every sample.
  Histogram small, large, empty;
  small.Record(5);
  large.Record(uint64_t{1} << 50);
  large.Record(3);
  small.Merge(large);
  empty.Merge(small);
  for (const Histogram* h : {&small, &empty}) {
    EXPECT_EQ(h->count(), 3u);
    EXPECT_EQ(h->min(), 3u);
    EXPECT_EQ(h->max(), uint64_t{1} << 50);
    EXPECT_EQ(h->Percentile(50), 5.0);
  }
  large.Clear();
  large.Record(7);
  EXPECT_EQ(large.Percentile(100), 7.0);
}

TEST(HistogramTest, MergeScaledMultipliesCountsAndMoments) {
  Histogram a, scaled;
  for (uint64_t v = 1000; v < 2000; v += 10) a.Record(v);  // 100 samples
  scaled.Record(5);
  scaled.MergeScaled(a, 2.5);
  EXPECT_EQ(scaled.count(), 1u + 250u);
  EXPECT_EQ(scaled.min(), 5u);
  EXPECT_EQ(scaled.max(), 1990u);
  EXPECT_EQ(scaled.sum(), 5u + static_cast<uint64_t>(std::llround(2.5 * a.sum())));
  // Percentiles of the scaled samples are those of `a` (the one small sample aside).
  EXPECT_NEAR(scaled.Percentile(50), a.Percentile(50), a.Percentile(50) * 0.02);
  EXPECT_NEAR(scaled.Percentile(99), a.Percentile(99), a.Percentile(99) * 0.01);
  // Scaling by less than one keeps round(factor * count) samples.
  Histogram thin;
  thin.MergeScaled(a, 0.1);
  EXPECT_EQ(thin.count(), 10u);
  Histogram none;
  none.MergeScaled(a, 0.0);
  EXPECT_EQ(none.count(), 0u);
}

}  // namespace
}  // namespace nvmw
