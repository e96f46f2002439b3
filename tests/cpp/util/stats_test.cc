// Tests of the shared definitions in nvmw/stats.h: the action table and ApplyAction
// (thesis Table 3.3), the state names (thesis Table 3.2) and the ClassStats field table.
#include "nvmw/stats.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>
#include <variant>

namespace nvmw {
namespace {

TEST(StatsTest, ActionTableIsThesisTable33) {
  const int expect[kNumActions][2] = {{0, 0}, {1, 0}, {-1, 0}, {0, 1}, {0, -1},
                                      {1, 1}, {1, -1}, {-1, 1}, {-1, -1}};
  for (int a = 0; a < kNumActions; a++) {
    EXPECT_EQ(kActionDeltas[a][0], expect[a][0]) << "action " << a;
    EXPECT_EQ(kActionDeltas[a][1], expect[a][1]) << "action " << a;
  }
}

TEST(StatsTest, ApplyActionMovesAndClamps) {
  for (int a = 0; a < kNumActions; a++) {
    const auto [i, b] = ApplyAction(5, 7, a, 32);
    EXPECT_EQ(i, 5 + kActionDeltas[a][0]) << "action " << a;
    EXPECT_EQ(b, 7 + kActionDeltas[a][1]) << "action " << a;
  }
  EXPECT_EQ(ApplyAction(1, 1, 8, 32), std::make_pair(1, 1));    // I-1, B-1 at the floor
  EXPECT_EQ(ApplyAction(32, 32, 5, 32), std::make_pair(32, 32));  // I+1, B+1 at the cap
  EXPECT_EQ(ApplyAction(4, 1, 6, 4), std::make_pair(4, 1));      // I+1 capped, B-1 floored
  EXPECT_EQ(ApplyAction(40, 0, 0, 32), std::make_pair(32, 1));   // out-of-range input is clamped
  static_assert(ApplyAction(2, 2, 7, 32) == std::make_pair(1, 3));
}

TEST(StatsTest, StateNamesAreThesisTable32Order) {
  EXPECT_EQ(kStateNames[0], "interactive_threads");
  EXPECT_EQ(kStateNames[1], "batch_threads");
  EXPECT_EQ(kStateNames[2], "interactive_queue_size");
  EXPECT_EQ(kStateNames[3], "batch_queue_size");
  EXPECT_EQ(kStateNames[4], "interactive_block_size");
  EXPECT_EQ(kStateNames[5], "batch_block_size");
  EXPECT_EQ(kStateNames[6], "interactive_write_ratio");
  EXPECT_EQ(kStateNames[7], "batch_write_ratio");
}

// Every field of ClassStats appears once, under a distinct name: writing a distinct value
// through each entry and reading it back through the same entry finds all of them.
TEST(StatsTest, ClassStatFieldsCoverEveryFieldOnce) {
  ClassStats s;
  int k = 1;
  for (const ClassStatField& f : kClassStatFields) {
    std::visit([&](auto member) { s.*member = static_cast<std::remove_reference_t<decltype(s.*member)>>(k); },
               f.member);
    k++;
  }
  std::set<std::string> names;
  k = 1;
  for (const ClassStatField& f : kClassStatFields) {
    names.insert(std::string(f.name));
    std::visit([&](auto member) { EXPECT_EQ(static_cast<double>(s.*member), k) << f.name; }, f.member);
    k++;
  }
  EXPECT_EQ(names.size(), kClassStatFields.size());
  // Each field received its own entry's value, so none is missing from the table.
  EXPECT_EQ(s.ops, 1u);
  EXPECT_EQ(s.errors, 2u);
  EXPECT_EQ(s.rejected, 3u);
  EXPECT_EQ(s.ops_per_s, 4);
  EXPECT_EQ(s.bytes_per_s, 5);
  EXPECT_EQ(s.p50_us, 6);
  EXPECT_EQ(s.p99_us, 7);
  EXPECT_EQ(s.p999_us, 8);
  EXPECT_EQ(s.mean_us, 9);
  EXPECT_EQ(s.std_us, 10);
  EXPECT_EQ(s.max_us, 11);
  EXPECT_EQ(s.queue_len_end, 12u);
  EXPECT_EQ(s.queue_len_mean, 13);
  EXPECT_EQ(s.mean_block_bytes, 14);
  EXPECT_EQ(s.write_ratio, 15);
  EXPECT_EQ(s.threads, 16);
  EXPECT_EQ(kClassStatFields[0].name, "ops");
  EXPECT_EQ(kClassStatFields[5].name, "p50_us");
  EXPECT_EQ(kClassStatFields[15].name, "threads");
}

}  // namespace
}  // namespace nvmw
