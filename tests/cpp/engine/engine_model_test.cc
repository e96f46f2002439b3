// Model-based test of both engines: seeded random sequences of Put, PutMany, Get,
// Exists, Remove and Count, every answer checked against a std::map holding what the
// store must hold. Keys are binary (NUL bytes, keys that differ only by trailing NULs,
// the longest key allowed), values from 0 bytes to hundreds of KB with sizes around
// the allocator's boundaries, PutMany batches of 1..20 items with keys given twice
// and invalid items mixed in. For the pmem engine also: the pool closed and reopened
// at random points, and a pool of libpmemobj's smallest size driven full, where a Put
// that does not fit answers NoSpace and changes nothing.
//
// Every build runs the seeds in kDefaultSeeds. For longer hunts by hand,
// NVMW_MODEL_SEEDS picks others ("1-500", "7,12,40-60") and NVMW_MODEL_OPS the
// number of operations per seed; a failure names its seed and operation.
#include <gtest/gtest.h>
#include <libpmemobj.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/pmem_engine_impl.h"
#include "engine/pmem_layout.h"
#include "engine_test_util.h"
#include "model_test_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using test::TempDir;

constexpr uint32_t kMaxKey = 512;
constexpr uint64_t kMaxValue = 1 << 20;
const std::vector<uint64_t> kDefaultSeeds = {1, 2, 3};
constexpr int kDefaultOps = 1500;      // per seed and engine
constexpr int kDefaultFullOps = 600;   // per seed, on the full pool
// Large values are written only while the model holds less than this, so the 128 MiB
// pool of the main sequence never fills (a NoSpace there is a failure).
constexpr size_t kLiveBytesCap = 32 << 20;

using Rng = ::nvmw::testing::ModelRng;


// A key for messages: its first bytes escaped (as the engine escapes bytes in its own
// messages), and its length.
std::string Show(std::string_view key) {
  return "\"" + pmem_internal::Printable(key, 24) + "\" (" + std::to_string(key.size()) + " B)";
}

// How `got` differs from `want`, without printing values of hundreds of KB.
std::string Diff(std::string_view got, std::string_view want) {
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " bytes, expected " + std::to_string(want.size());
  }
  size_t i = 0;
  while (i < got.size() && got[i] == want[i]) ++i;
  return "same size (" + std::to_string(got.size()) + " B), first difference at byte " +
         std::to_string(i);
}

std::string RandomBytes(Rng& rng, size_t n) {
  std::string v(n, '\0');
  uint64_t x = rng.Next() | 1;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  if (n > 0 && rng.OneIn(2)) {  // a run of NUL bytes, sometimes at either end
    const size_t at = rng.OneIn(3) ? 0 : rng.Below(n);
    std::memset(v.data() + at, 0, rng.Between(1, n - at));
  }
  if (n > 0 && rng.OneIn(4)) v[n - 1] = '\0';
  return v;
}

// Keys of one run: short and long, with NUL bytes, families that differ only by
// trailing NULs ("a", "a\0", "a\0\0"), a single NUL, and keys of exactly kMaxKey bytes.
std::vector<std::string> MakeKeys(Rng& rng, size_t n) {
  std::vector<std::string> keys = {std::string(1, '\0'), std::string(kMaxKey, '\0'),
                                   std::string(kMaxKey, 'k')};
  auto add = [&](const std::string& k) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  while (keys.size() < n) {
    const uint64_t r = rng.Below(100);
    const size_t len = r < 40 ? rng.Between(1, 8)
                       : r < 85 ? rng.Between(9, 40)
                       : r < 97 ? rng.Between(41, 200)
                                : rng.Between(201, kMaxKey);
    std::string k(len, '\0');
    for (char& c : k) c = rng.OneIn(4) ? '\0' : static_cast<char>(rng.Below(256));
    add(k);
    if (rng.OneIn(6) && k.size() + 2 <= kMaxKey) {
      add(k + std::string(1, '\0'));
      add(k + std::string(2, '\0'));
    }
  }
  return keys;
}

// A key every engine must refuse: empty, or longer than kMaxKey.
std::string InvalidKey(Rng& rng) {
  if (rng.OneIn(3)) return std::string();
  return std::string(kMaxKey + rng.Between(1, rng.OneIn(2) ? 1 : 600), '\x01');
}

// A value size whose pmem entry object (40-byte header, key, value, up to 63 bytes of
// padding before a value of kAlignValueBytes or more) plus libpmemobj's 16-byte
// allocation header lands at or near a power of two from 64 B to 1 MiB or a multiple
// of libpmemobj's 256 KiB chunk; or a value just around kAlignValueBytes.
size_t BoundarySize(Rng& rng, size_t key_len) {
  constexpr uint64_t kAlign = pmem_internal::kAlignValueBytes;
  if (rng.OneIn(4)) return kAlign - 1 + rng.Below(3);
  const uint64_t object = rng.OneIn(3) ? (uint64_t{256} << 10) * rng.Between(1, 3)
                                       : uint64_t{1} << rng.Between(6, 20);
  static constexpr int64_t kDelta[] = {-17, -16, -1, 0, 1, 16};
  int64_t v = static_cast<int64_t>(object) - 16 + kDelta[rng.Below(6)] - 40 -
              static_cast<int64_t>(key_len);
  if (v >= static_cast<int64_t>(kAlign + 63)) v -= 63;
  return static_cast<size_t>(std::clamp<int64_t>(v, 0, kMaxValue));
}

size_t ValueSize(Rng& rng, size_t key_len, bool allow_large) {
  const uint64_t r = rng.Below(100);
  if (r < 15) return 0;
  if (r < 45) return rng.Between(1, 100);
  if (r < 72) return BoundarySize(rng, key_len);
  if (r < 94 || !allow_large) return rng.Between(101, 64 << 10);
  if (r < 99) return rng.Between(100 << 10, 900 << 10);
  return kMaxValue;  // the largest value allowed
}

// One seeded run against one engine.
class ModelRun {
 public:
  // `pool` empty: the memory engine; otherwise a pmem pool at that path, created.
  ModelRun(uint64_t seed, std::string pool, const PmemOptions& pmem)
      : rng_(seed), seed_(seed), pool_(std::move(pool)), pmem_(pmem) {
    keys_ = MakeKeys(rng_, 160);
  }

  void Open() {
    if (pool_.empty()) {
      MemoryOptions o;
      o.shards = 1 + static_cast<uint32_t>(rng_.Below(8));
      o.max_key_bytes = kMaxKey;
      o.max_value_bytes = kMaxValue;
      engine_ = NewMemoryEngine(o);
      return;
    }
    Status s = OpenPmemEngine(pool_, pmem_, &engine_);
    ASSERT_TRUE(s.ok()) << Where() << "open: " << s.ToString();
  }

  // Closes the pool and opens it again, sometimes verifying checksums on every read;
  // then everything the model holds must be there, and nothing else.
  void Reopen() {
    what_ = "reopen";
    engine_.reset();
    pmem_.verify_checksums = rng_.OneIn(2);
    ASSERT_NO_FATAL_FAILURE(Open());
    ++reopens_;
    ASSERT_NO_FATAL_FAILURE(VerifyAll());
  }

  // The main sequence: every answer must be the model's (a NoSpace is a failure).
  void Run(int ops) {
    for (int i = 0; i < ops; ++i) {
      ASSERT_NO_FATAL_FAILURE(Step(/*may_be_full=*/false));
      if (i % 250 == 249) {
        ASSERT_NO_FATAL_FAILURE(VerifyAll());
      }
    }
    ASSERT_NO_FATAL_FAILURE(VerifyAll());
    if (!pool_.empty()) {
      ASSERT_NO_FATAL_FAILURE(Reopen());
    }
  }

  // The small pool: filled with new keys until it refuses values of every size, then
  // random operations near full, where a Put or PutMany item may also be NoSpace
  // (nothing changed), a Remove must still work, and what a Remove freed must take
  // the same value again.
  void RunFull(int ops) {
    bool refused_largest = false;
    for (int i = 0; i < 20000 && !refused_largest; ++i) {
      // Random sizes until 30 refusals, then values of kMaxValue until one is refused
      // (each taken one holds 1 MiB of the 8 MiB pool).
      const bool largest = nospace_ >= 30;
      std::string key = FreshKey();
      std::string value = RandomBytes(
          rng_, largest ? kMaxValue : ValueSize(rng_, key.size(), /*allow_large=*/true));
      what_ = "fill: put " + Show(key) + ", " + std::to_string(value.size()) + " B";
      ++ops_;
      Status s = engine_->Put(key, value);
      if (s.ok()) {
        model_[key] = value;
      } else {
        ASSERT_TRUE(s.IsNoSpace()) << Where() << s.ToString();
        ++nospace_;
        refused_largest = largest;
      }
      ASSERT_NO_FATAL_FAILURE(CheckGet(key));
      ASSERT_NO_FATAL_FAILURE(CheckCount());
    }
    ASSERT_TRUE(refused_largest) << Where() << "the pool never filled";
    ASSERT_FALSE(model_.empty()) << Where() << "the pool took nothing";
    // Nothing was freed since a value of kMaxValue was refused: an overwrite as large
    // must be refused too, and keep the old value.
    {
      const std::string key = ModelKey();
      what_ = "overwrite of " + Show(key) + " with " + std::to_string(kMaxValue) + " B, full";
      ++ops_;
      Status s = engine_->Put(key, RandomBytes(rng_, kMaxValue));
      ASSERT_TRUE(s.IsNoSpace()) << Where() << s.ToString();
      ++nospace_;
      ASSERT_NO_FATAL_FAILURE(CheckGet(key));
    }
    ASSERT_NO_FATAL_FAILURE(Reuse());
    for (int i = 0; i < ops; ++i) {
      ASSERT_NO_FATAL_FAILURE(Step(/*may_be_full=*/true));
      if (i % 100 == 99) {
        ASSERT_NO_FATAL_FAILURE(Reuse());
      }
    }
    ASSERT_NO_FATAL_FAILURE(VerifyAll());
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }

  uint64_t ops() const { return ops_; }
  uint64_t reopens() const { return reopens_; }
  uint64_t nospace() const { return nospace_; }

 private:
  std::string Where() const {
    return "seed " + std::to_string(seed_) + ", " + (pool_.empty() ? "memory" : "pmem") +
           ", operation " + std::to_string(ops_) + " (" + what_ + "): ";
  }

  // A key of the run's set: half the time one the model holds, so that Remove and
  // overwrites hit.
  const std::string& PickKey() {
    if (!model_.empty() && rng_.OneIn(2)) return ModelKey();
    return keys_[rng_.Below(keys_.size())];
  }
  const std::string& ModelKey() {
    auto it = model_.begin();
    std::advance(it, rng_.Below(model_.size()));
    return it->first;
  }
  // A valid key the model does not hold (the full pool takes more keys than the set).
  std::string FreshKey() {
    for (;;) {
      std::string k = RandomBytes(rng_, rng_.Between(1, 24));
      if (model_.count(k) == 0) return k;
    }
  }

  void Step(bool may_be_full) {
    ++ops_;
    const uint64_t r = rng_.Below(1000);
    if (r < 250) {
      ASSERT_NO_FATAL_FAILURE(DoPut(may_be_full));
    } else if (r < 400) {
      ASSERT_NO_FATAL_FAILURE(DoPutMany(may_be_full));
    } else if (r < 560) {
      const std::string key = rng_.OneIn(30) ? InvalidKey(rng_) : PickKey();
      what_ = "get " + Show(key);
      ASSERT_NO_FATAL_FAILURE(rng_.OneIn(2) ? CheckGet(key) : CheckGetInPlace(key));
    } else if (r < 680) {
      const std::string key = rng_.OneIn(30) ? InvalidKey(rng_) : PickKey();
      what_ = "exists " + Show(key);
      ASSERT_NO_FATAL_FAILURE(CheckExists(key));
    } else if (r < 850 || (pool_.empty() && r >= 990)) {
      ASSERT_NO_FATAL_FAILURE(DoRemove());
    } else if (r < 990) {
      what_ = "count";
    } else {
      ASSERT_NO_FATAL_FAILURE(Reopen());
    }
    ASSERT_NO_FATAL_FAILURE(CheckCount());
  }

  void DoPut(bool may_be_full) {
    const bool bad_key = rng_.OneIn(25);
    const std::string key = bad_key ? InvalidKey(rng_) : PickKey();
    const bool bad_value = !bad_key && rng_.OneIn(40);
    const size_t len = bad_value ? kMaxValue + rng_.Between(1, 64)
                                 : ValueSize(rng_, key.size(), LargeAllowed(may_be_full));
    const std::string value = RandomBytes(rng_, len);
    what_ = "put " + Show(key) + ", " + std::to_string(len) + " B";
    Status s = engine_->Put(key, value);
    if (bad_key || bad_value) {
      ASSERT_TRUE(s.IsInvalidArgument()) << Where() << s.ToString();
    } else if (s.ok()) {
      model_[key] = value;
    } else {
      ASSERT_TRUE(may_be_full && s.IsNoSpace()) << Where() << s.ToString();
      ++nospace_;
    }
    if (!bad_key) {
      ASSERT_NO_FATAL_FAILURE(CheckGet(key));
    }
  }

  void DoPutMany(bool may_be_full) {
    const size_t n = rng_.Between(1, 20);
    std::vector<std::string> keys(n), values(n);
    std::vector<bool> invalid(n, false);
    int large = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng_.Below(100);
      if (r < 6) {
        keys[i] = InvalidKey(rng_);
        invalid[i] = true;
      } else if (i > 0 && r < 25) {
        keys[i] = keys[rng_.Below(i)];  // a key given twice: the later value wins
        invalid[i] = keys[i].empty() || keys[i].size() > kMaxKey;
      } else {
        keys[i] = PickKey();
      }
      size_t len;
      if (!invalid[i] && rng_.OneIn(40)) {
        len = kMaxValue + rng_.Between(1, 64);
        invalid[i] = true;
      } else {
        len = ValueSize(rng_, keys[i].size(), large < 2 && LargeAllowed(may_be_full));
        large += len >= (100 << 10);
      }
      values[i] = RandomBytes(rng_, len);
    }
    what_ = "putmany of " + std::to_string(n) + " items";
    std::vector<KeyValue> items;
    for (size_t i = 0; i < n; ++i) items.push_back(KeyValue{keys[i], values[i]});
    // A status no engine gives for a Put, so an item left without a result is seen.
    std::vector<Status> results(n, Status::NotSupported("result not set"));
    engine_->PutMany(items.data(), n, results.data());
    for (size_t i = 0; i < n; ++i) {
      const std::string item = "item " + std::to_string(i) + ", " + Show(keys[i]) + ", " +
                               std::to_string(values[i].size()) + " B: ";
      if (invalid[i]) {
        ASSERT_TRUE(results[i].IsInvalidArgument()) << Where() << item << results[i].ToString();
      } else if (results[i].ok()) {
        model_[keys[i]] = values[i];
      } else {
        ASSERT_TRUE(may_be_full && results[i].IsNoSpace())
            << Where() << item << results[i].ToString();
        ++nospace_;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (keys[i].empty() || keys[i].size() > kMaxKey) continue;
      what_ = "putmany of " + std::to_string(n) + " items, then get of item " +
              std::to_string(i) + " " + Show(keys[i]);
      ASSERT_NO_FATAL_FAILURE(CheckGet(keys[i]));
    }
  }

  void DoRemove() {
    const bool bad_key = rng_.OneIn(30);
    const std::string key = bad_key ? InvalidKey(rng_) : PickKey();
    what_ = "remove " + Show(key);
    Status s = engine_->Remove(key);
    if (bad_key) {
      ASSERT_TRUE(s.IsInvalidArgument()) << Where() << s.ToString();
      return;
    }
    if (model_.erase(key) == 1) {
      ASSERT_TRUE(s.ok()) << Where() << s.ToString();
    } else {
      ASSERT_TRUE(s.IsNotFound()) << Where() << s.ToString();
    }
    ASSERT_NO_FATAL_FAILURE(CheckGet(key));
  }

  // On the full pool: a key removed, then a value of the same size under the same key
  // must fit in the space the removal freed.
  void Reuse() {
    if (model_.empty()) return;
    const std::string key = ModelKey();
    const size_t len = model_[key].size();
    what_ = "remove " + Show(key) + " to reuse its " + std::to_string(len) + " B";
    ++ops_;
    Status s = engine_->Remove(key);
    ASSERT_TRUE(s.ok()) << Where() << s.ToString();
    model_.erase(key);
    ASSERT_NO_FATAL_FAILURE(CheckCount());
    std::string value = RandomBytes(rng_, len);
    what_ = "put " + Show(key) + ", " + std::to_string(len) + " B into the space just freed";
    ++ops_;
    s = engine_->Put(key, value);
    ASSERT_TRUE(s.ok()) << Where() << s.ToString();
    model_[key] = value;
    ASSERT_NO_FATAL_FAILURE(CheckGet(key));
    ASSERT_NO_FATAL_FAILURE(CheckCount());
  }

  bool LargeAllowed(bool may_be_full) const { return may_be_full || live_bytes() < kLiveBytesCap; }
  size_t live_bytes() const {
    size_t n = 0;
    for (const auto& [k, v] : model_) n += k.size() + v.size();
    return n;
  }

  static bool ValidKey(std::string_view key) { return !key.empty() && key.size() <= kMaxKey; }

  void CheckGet(const std::string& key) {
    const std::string kUnset = "\x01unchanged";
    std::string got = kUnset;
    Status s = engine_->Get(key, &got);
    if (!ValidKey(key)) {
      ASSERT_TRUE(s.IsInvalidArgument()) << Where() << "get: " << s.ToString();
      return;
    }
    auto it = model_.find(key);
    if (it == model_.end()) {
      ASSERT_TRUE(s.IsNotFound()) << Where() << "get " << Show(key) << " is absent: "
                                  << s.ToString();
      ASSERT_EQ(got, kUnset) << Where() << "a get that found nothing wrote its output";
    } else {
      ASSERT_TRUE(s.ok()) << Where() << "get " << Show(key) << ": " << s.ToString();
      ASSERT_TRUE(got == it->second) << Where() << "get " << Show(key) << ": "
                                     << Diff(got, it->second);
    }
  }

  // The zero-copy form: the callback runs once on OK, never otherwise.
  void CheckGetInPlace(const std::string& key) {
    auto it = model_.find(key);
    int calls = 0;
    std::string got;
    Status s = engine_->Get(key, [&](std::string_view v) {
      ++calls;
      got.assign(v.data(), v.size());
    });
    if (!ValidKey(key)) {
      ASSERT_TRUE(s.IsInvalidArgument()) << Where() << s.ToString();
      ASSERT_EQ(calls, 0) << Where();
    } else if (it == model_.end()) {
      ASSERT_TRUE(s.IsNotFound()) << Where() << s.ToString();
      ASSERT_EQ(calls, 0) << Where();
    } else {
      ASSERT_TRUE(s.ok()) << Where() << s.ToString();
      ASSERT_EQ(calls, 1) << Where();
      ASSERT_TRUE(got == it->second) << Where() << Diff(got, it->second);
    }
  }

  void CheckExists(const std::string& key) {
    Status s = engine_->Exists(key);
    if (!ValidKey(key)) {
      ASSERT_TRUE(s.IsInvalidArgument()) << Where() << s.ToString();
    } else if (model_.count(key) != 0) {
      ASSERT_TRUE(s.ok()) << Where() << s.ToString();
    } else {
      ASSERT_TRUE(s.IsNotFound()) << Where() << s.ToString();
    }
  }

  void CheckCount() {
    ASSERT_EQ(engine_->Count(), model_.size()) << Where() << "count";
  }

  // Every key of the model holds its value; every other key of the set is absent.
  void VerifyAll() {
    const std::string was = what_;
    for (const auto& [key, value] : model_) {
      what_ = was + ", then verify " + Show(key);
      ASSERT_NO_FATAL_FAILURE(CheckGet(key));
    }
    for (const std::string& key : keys_) {
      what_ = was + ", then verify " + Show(key);
      ASSERT_NO_FATAL_FAILURE(CheckExists(key));
    }
    what_ = was + ", then verify the count";
    ASSERT_NO_FATAL_FAILURE(CheckCount());
    what_ = was;
  }

  Rng rng_;
  const uint64_t seed_;
  const std::string pool_;
  PmemOptions pmem_;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> model_;
  std::unique_ptr<Engine> engine_;
  std::string what_ = "start";
  uint64_t ops_ = 0, reopens_ = 0, nospace_ = 0;
};

PmemOptions ModelPmemOptions(uint64_t pool_bytes, uint64_t bucket_count) {
  PmemOptions o;
  o.pool_size_bytes = pool_bytes;
  o.bucket_count = bucket_count;
  o.max_key_bytes = kMaxKey;
  o.max_value_bytes = kMaxValue;
  o.huge_pages = false;  // a short-lived pool: no background pass over it
  return o;
}

class EngineModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "mkdtemp under /dev/shm failed"; }
  TempDir dir_;
};

// Both engines: a random sequence per seed, every answer the model's.
TEST_P(EngineModelTest, RandomOperationsMatchAMap) {
  const int ops = ::nvmw::testing::ModelOps(kDefaultOps);
  uint64_t total_ops = 0, reopens = 0;
  const std::vector<uint64_t> seeds = ::nvmw::testing::ModelSeeds(kDefaultSeeds);
  ASSERT_FALSE(seeds.empty()) << "NVMW_MODEL_SEEDS names no seed";
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // Bucket counts from one chain for every key (a PutMany group of one) to more
    // buckets than lock stripes (two buckets of a group may share a stripe).
    static constexpr uint64_t kBuckets[] = {1, 16, 4096};
    const std::string pool =
        GetParam() == "memory" ? "" : dir_.File("pool-" + std::to_string(seed));
    ModelRun run(seed, pool, ModelPmemOptions(128 << 20, kBuckets[seed % 3]));
    ASSERT_NO_FATAL_FAILURE(run.Open());
    ASSERT_NO_FATAL_FAILURE(run.Run(ops));
    total_ops += run.ops();
    reopens += run.reopens();
    if (!pool.empty()) unlink(pool.c_str());
  }
  RecordProperty("operations", std::to_string(total_ops));
  RecordProperty("reopens", std::to_string(reopens));
}

INSTANTIATE_TEST_SUITE_P(BothEngines, EngineModelTest, ::testing::Values("memory", "pmem"),
                         [](const auto& info) { return info.param; });

// The pmem engine in a pool of libpmemobj's smallest size, driven full.
TEST(PmemEngineModelTest, FullPoolMatchesAMap) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp under /dev/shm failed";
  const int ops = ::nvmw::testing::ModelOps(kDefaultFullOps);
  uint64_t total_ops = 0, nospace = 0;
  const std::vector<uint64_t> seeds = ::nvmw::testing::ModelSeeds(kDefaultSeeds);
  ASSERT_FALSE(seeds.empty()) << "NVMW_MODEL_SEEDS names no seed";
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::string pool = dir.File("full-" + std::to_string(seed));
    ModelRun run(seed, pool, ModelPmemOptions(PMEMOBJ_MIN_POOL, seed % 2 == 0 ? 1 : 64));
    ASSERT_NO_FATAL_FAILURE(run.Open());
    ASSERT_NO_FATAL_FAILURE(run.RunFull(ops));
    total_ops += run.ops();
    nospace += run.nospace();
    unlink(pool.c_str());
  }
  RecordProperty("operations", std::to_string(total_ops));
  RecordProperty("nospace", std::to_string(nospace));
}

// Space a Remove frees is reusable by values of other sizes while the pool stays open:
// one value of each of 17 sizes from 20 to 350 KiB, all removed, must leave an empty
// store with about the room of a fresh pool. libpmemobj keeps one run per allocation
// class attached even when it is empty; with its own classes (runs of up to 4 MiB) the
// emptied store took 18 values of 1 MiB where a fresh 64 MiB pool takes 42.
TEST(PmemEngineModelTest, SpaceFreedByOneSizeIsReusedByAnother) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp under /dev/shm failed";
  const PmemOptions o = ModelPmemOptions(64 << 20, 64);
  const std::string mib(1 << 20, 'm');
  auto fill = [&](Engine* e) {
    int n = 0;
    while (e->Put("big" + std::to_string(n), mib).ok()) ++n;
    return n;
  };
  std::unique_ptr<Engine> fresh, used;
  ASSERT_TRUE(OpenPmemEngine(dir.File("fresh"), o, &fresh).ok());
  const int fresh_fits = fill(fresh.get());
  fresh.reset();
  ASSERT_GT(fresh_fits, 30);
  ASSERT_TRUE(OpenPmemEngine(dir.File("used"), o, &used).ok());
  const int kKiB[] = {20, 24, 28, 33, 40, 48, 57, 68, 82, 98, 118, 140, 168, 200, 240, 290, 350};
  for (int kib : kKiB) {
    ASSERT_TRUE(used->Put("mid" + std::to_string(kib), std::string(kib << 10, 'v')).ok()) << kib;
  }
  for (int kib : kKiB) ASSERT_TRUE(used->Remove("mid" + std::to_string(kib)).ok()) << kib;
  ASSERT_EQ(used->Count(), 0u);
  // What may stay attached: one run per class used, a chunk (256 KiB) each below 255 KiB
  // and one object's chunks above, 19 chunks here: under 4 values of 1 MiB (5 chunks
  // each).
  const int used_fits = fill(used.get());
  EXPECT_GE(used_fits, fresh_fits - 4) << "an emptied 64 MiB pool took " << used_fits
                                       << " values of 1 MiB, a fresh one " << fresh_fits;
}

}  // namespace
}  // namespace nvmw
