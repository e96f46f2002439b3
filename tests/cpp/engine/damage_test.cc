// Damaged pool files, one family per test: bytes flipped in the pool header, in a
// link, in an entry's value; truncated, empty, mode-000, foreign and non-UTF-8
// layout files; interrupted and concurrent creation. A damaged pool must never
// crash the process or hand out a wrong value, a refused file must be left byte
// for byte as it was, and CheckPmemPool must name what is damaged and salvage
// every intact entry.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <libpmemobj.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_util.h"
#include "engine_test_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using test::CreatePoolWithLayout;
using test::ReadFile;
using test::TempDir;
using test::WriteFile;

PmemOptions Small() {
  PmemOptions o;
  o.pool_size_bytes = 16ull << 20;
  o.bucket_count = 64;
  return o;
}

std::string Key(int i) { return "dmg-key-" + std::to_string(i); }
std::string Val(int i) { return "value-of-key-" + std::to_string(i) + std::string(40 + i, 'v'); }

bool AllPrintableAscii(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

class DamageTest : public ::testing::Test {
 protected:
  static constexpr int kKeys = 200;

  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    path_ = dir_.File("pool");
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path_, Small(), &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(e->Put(Key(i), Val(i)).ok());
    e.reset();
    pristine_ = ReadFile(path_);
  }

  // File offset of the entry holding Key(i): its key bytes sit 40 bytes in.
  size_t EntryOffset(int i) const {
    std::string needle = Key(i) + "value-of-key-" + std::to_string(i);
    size_t at = pristine_.find(needle);
    EXPECT_NE(at, std::string::npos);
    return at - 40;
  }

  // File offset of the 8-byte link that points at the entry of Key(i).
  size_t LinkTo(int i) const {
    uint64_t off = EntryOffset(i);
    for (size_t p = 8192; p + 8 <= pristine_.size(); p += 8) {
      if (std::memcmp(pristine_.data() + p, &off, 8) == 0) return p;
    }
    ADD_FAILURE() << "no link to entry " << i;
    return 0;
  }

  // Opens a damaged image that must be refused; the file must stay unchanged.
  Status ExpectRefusedUnchanged(const std::string& image) {
    WriteFile(path_, image);
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path_, Small(), &e);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(e, nullptr);
    EXPECT_TRUE(ReadFile(path_) == image) << "a refused pool was modified: " << s.ToString();
    EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
    EXPECT_TRUE(AllPrintableAscii(s.message())) << s.message();
    return s;
  }

  PmemCheckReport Check(const std::string& salvage = "") {
    PmemCheckOptions co;
    co.salvage_path = salvage;
    co.salvage_options = Small();
    PmemCheckReport r;
    std::string before = ReadFile(path_);
    Status s = CheckPmemPool(path_, co, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(ReadFile(path_) == before) << "check modified the pool";
    return r;
  }

  TempDir dir_;
  std::string path_;
  std::string pristine_;
};

TEST_F(DamageTest, IntactPoolChecksClean) {
  PmemCheckReport r = Check();
  EXPECT_TRUE(r.clean()) << (r.problems.empty() ? "" : r.problems[0]);
  EXPECT_TRUE(r.readable);
  EXPECT_EQ(r.format_version, 2u);
  EXPECT_EQ(r.entries_ok, static_cast<uint64_t>(kKeys));
}

TEST_F(DamageTest, SalvageTargetUnderAFileOrThroughADanglingLinkIsNamed) {
  PmemCheckOptions co;
  co.salvage_options = Small();
  PmemCheckReport r;
  // A path whose directory is a regular file: not "exists", the real reason.
  const std::string file = dir_.path() + "/plain";
  WriteFile(file, "x");
  co.salvage_path = file + "/out.pool";
  Status s = CheckPmemPool(path_, co, &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("Not a directory"), std::string::npos) << s.message();
  // A dangling symbolic link is a name in use: refused, nothing created where it points.
  const std::string target = dir_.path() + "/elsewhere.pool";
  const std::string link = dir_.path() + "/link.pool";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  co.salvage_path = link;
  s = CheckPmemPool(path_, co, &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("salvage target exists"), std::string::npos) << s.message();
  struct stat st;
  EXPECT_NE(stat(target.c_str(), &st), 0) << "a pool was created through the link";
}

TEST_F(DamageTest, FlippedHeaderBytesAreRefusedUnchanged) {
  std::string img = pristine_;
  img[200] ^= 0x01;  // pool header, inside its checksum
  Status s = ExpectRefusedUnchanged(img);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("header"), std::string::npos) << s.message();
  PmemCheckReport r = Check();
  EXPECT_FALSE(r.clean());
  EXPECT_FALSE(r.readable);

  img = pristine_;
  img[4096 + 600] ^= 0x10;  // descriptor, past the layout name
  s = ExpectRefusedUnchanged(img);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("descriptor"), std::string::npos) << s.message();

  // The root object: its checksum catches a flipped field.
  uint64_t root_off;
  std::memcpy(&root_off, pristine_.data() + 4096 + 2048, 8);
  img = pristine_;
  img[root_off + 16] ^= 0x04;  // bucket_count
  s = ExpectRefusedUnchanged(img);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("root"), std::string::npos) << s.message();
}

// Found by fuzz/pool_image_fuzz.cc: a damaged log header in one of libpmemobj's
// lanes made pmemobj_open itself fault (SIGFPE); it is now refused beforehand.
TEST_F(DamageTest, FlippedLaneLogHeaderIsRefusedUnchanged) {
  uint64_t lanes;
  std::memcpy(&lanes, pristine_.data() + 4096 + PMEMOBJ_MAX_LAYOUT, 8);
  // next of the undo log, capacity of the external redo log, an unused word, and
  // the first undo entry (replayed without a checksum: a SIGSEGV in pmemobj_open).
  for (size_t field : {size_t{960 + 10}, size_t{256 + 17}, size_t{40}, size_t{1024 + 4}}) {
    std::string img = pristine_;
    img[lanes + 485 * 3072 + field] ^= 0x09;
    Status s = ExpectRefusedUnchanged(img);
    EXPECT_TRUE(s.IsCorruption()) << field << ": " << s.ToString();
    EXPECT_NE(s.message().find("lane"), std::string::npos) << s.message();
  }
}

TEST_F(DamageTest, FlippedLinkIsRefusedAndSalvageKeepsTheRest) {
  const size_t link = LinkTo(7);
  for (int bit : {3, 12, 29, 45, 62}) {  // misaligned, inside the pool, far outside
    std::string img = pristine_;
    img[link + bit / 8] ^= static_cast<char>(1 << (bit % 8));
    Status s = ExpectRefusedUnchanged(img);
    EXPECT_TRUE(s.IsCorruption()) << "bit " << bit << ": " << s.ToString();
  }
  // A link moved onto another allocated entry (of another bucket).
  std::string img = pristine_;
  uint64_t other = EntryOffset(100);
  std::memcpy(img.data() + link, &other, 8);
  WriteFile(path_, img);
  PmemCheckReport r = Check(dir_.File("salvaged"));
  EXPECT_FALSE(r.clean());
  EXPECT_TRUE(r.readable);
  EXPECT_GE(r.links_damaged, 1u);
  std::unique_ptr<Engine> e;
  PmemOptions o = Small();
  o.create_if_missing = false;
  Status s = OpenPmemEngine(dir_.File("salvaged"), o, &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // Every key whose entry is intact is there with its exact value; entries cut
  // off behind the link come back through the unreachable-entry pass.
  EXPECT_EQ(e->Count(), r.salvaged);
  EXPECT_EQ(r.salvaged, static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    std::string v;
    ASSERT_TRUE(e->Get(Key(i), &v).ok()) << Key(i);
    EXPECT_EQ(v, Val(i));
  }
}

TEST_F(DamageTest, FlippedValueByteIsQuarantinedNotServed) {
  std::string img = pristine_;
  const size_t entry = EntryOffset(42);
  img[entry + 40 + Key(42).size() + 5] ^= 0x20;  // inside the value
  WriteFile(path_, img);
  {
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path_, Small(), &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
    std::string v;
    s = e->Get(Key(42), &v);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(Key(42)), std::string::npos) << s.message();
    EXPECT_TRUE(e->Exists(Key(42)).IsCorruption());
    for (int i = 0; i < kKeys; ++i) {
      if (i == 42) continue;
      ASSERT_TRUE(e->Get(Key(i), &v).ok()) << Key(i);
      EXPECT_EQ(v, Val(i));
    }
  }
  WriteFile(path_, img);
  PmemCheckReport r = Check(dir_.File("salvaged"));
  EXPECT_EQ(r.entries_damaged, 1u);
  EXPECT_EQ(r.entries_ok, static_cast<uint64_t>(kKeys - 1));
  EXPECT_EQ(r.salvaged, static_cast<uint64_t>(kKeys - 1));
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems[0].find(Key(42)), std::string::npos) << r.problems[0];

  // paranoid_checks refuses the pool instead, and leaves it unchanged.
  PmemOptions o = Small();
  o.paranoid_checks = true;
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(path_, o, &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(ReadFile(path_) == img);

  // Without paranoia a Put replaces the damaged entry, and a Remove drops it.
  ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
  ASSERT_TRUE(e->Put(Key(42), "fresh").ok());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys));
  std::string v;
  ASSERT_TRUE(e->Get(Key(42), &v).ok());
  EXPECT_EQ(v, "fresh");
  e.reset();
  ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys));
  e.reset();
  PmemCheckReport r2 = Check();
  EXPECT_TRUE(r2.clean()) << (r2.problems.empty() ? "" : r2.problems[0]);
}

TEST_F(DamageTest, DamagedLengthFieldsAreSteppedOverUnread) {
  std::string img = pristine_;
  const size_t entry = EntryOffset(9);
  uint32_t huge = 0x7fffff00;
  std::memcpy(img.data() + entry + 24, &huge, 4);  // key_len
  WriteFile(path_, img);
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(path_, Small(), &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string v;
  // Its key cannot be read, so no lookup matches it; the miss in its bucket is not
  // taken for an answer (the key was written), and the others are served.
  s = e->Get(Key(9), &v);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(e->Exists(Key(9)).IsCorruption());
  for (int i = 10; i < 20; ++i) EXPECT_TRUE(e->Get(Key(i), &v).ok());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
}

uint64_t BucketOf(const std::string& key) {
  return engine_internal::HashKey(key) & (Small().bucket_count - 1);
}

TEST_F(DamageTest, CheckRefusesAPoolAnotherEngineHasOpen) {
  // A copy taken while another engine can write is not one state of the pool: it was
  // reported as a damaged heap ("pool initialization failed") of an intact pool.
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
    std::string before = ReadFile(path_);
    PmemCheckReport r;
    Status s = CheckPmemPool(path_, PmemCheckOptions(), &r);
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
    EXPECT_NE(s.message().find("open in another process"), std::string::npos) << s.message();
    EXPECT_TRUE(r.problems.empty());
    EXPECT_TRUE(ReadFile(path_) == before);
  }
  PmemCheckReport r = Check();  // once closed: checked, and intact
  EXPECT_TRUE(r.readable);
  EXPECT_TRUE(r.clean()) << (r.problems.empty() ? "" : r.problems[0]);
}

TEST_F(DamageTest, FlippedKeyByteIsCorruptionNotAbsent) {
  std::string img = pristine_;
  const size_t entry = EntryOffset(42);
  img[entry + 40 + 2] ^= 0x01;  // "dmg-key-42" reads "dlg-key-42"
  WriteFile(path_, img);
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(path_, Small(), &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string v = "untouched";
  s = e->Get(Key(42), &v);  // was NotFound: a written key read as absent
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(Key(42)), std::string::npos) << s.message();
  EXPECT_EQ(v, "untouched");
  EXPECT_TRUE(e->Exists(Key(42)).IsCorruption());
  // Every other key is served; keys never written are absent in the other buckets.
  for (int i = 0; i < kKeys; ++i) {
    if (i == 42) continue;
    ASSERT_TRUE(e->Get(Key(i), &v).ok()) << Key(i);
    EXPECT_EQ(v, Val(i));
  }
  int absent_elsewhere = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string k = "never-written-" + std::to_string(i);
    if (BucketOf(k) == BucketOf(Key(42))) continue;
    EXPECT_TRUE(e->Get(k, &v).IsNotFound()) << k;
    ++absent_elsewhere;
  }
  EXPECT_GT(absent_elsewhere, 50);
  // A Put of the key gives it a fresh entry, served from then on.
  ASSERT_TRUE(e->Put(Key(42), "fresh").ok());
  ASSERT_TRUE(e->Get(Key(42), &v).ok());
  EXPECT_EQ(v, "fresh");
}

TEST_F(DamageTest, FlippedKeyAndHashBytesAreCorruptionNotAbsent) {
  // Key bytes and stored hash both damaged: no lookup matches the entry and its hash is
  // no longer the key's, so nothing says whose it was. It was read as absent.
  const size_t entry = EntryOffset(42);
  const uint64_t bucket = BucketOf(Key(42));
  // A bit of the hash's top byte (the bucket, its low bits, unchanged), then bits of its
  // low byte (the stored hash names another bucket; the links still put it in this one).
  const std::pair<size_t, char> kHashDamage[] = {{7, 0x40}, {0, 0x05}};
  for (auto [at, bits] : kHashDamage) {
    SCOPED_TRACE("hash byte " + std::to_string(at));
    std::string img = pristine_;
    img[entry + 40 + 2] ^= 0x01;   // "dmg-key-42" reads "dlg-key-42"
    img[entry + 16 + at] ^= bits;  // Entry::hash
    uint64_t stored;
    std::memcpy(&stored, img.data() + entry + 16, 8);
    ASSERT_NE(stored, engine_internal::HashKey(Key(42)));
    ASSERT_NE(stored, engine_internal::HashKey(img.substr(entry + 40, Key(42).size())));
    ASSERT_EQ((stored & (Small().bucket_count - 1)) == bucket, at == 7);
    WriteFile(path_, img);
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path_, Small(), &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
    std::string v = "untouched";
    s = e->Get(Key(42), &v);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(Key(42)), std::string::npos) << s.message();
    EXPECT_EQ(v, "untouched");
    s = e->Exists(Key(42));
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    // Every other key is served. A miss in its bucket may be the damaged entry's key,
    // so it is not answered either; misses in the other buckets are absent.
    for (int i = 0; i < kKeys; ++i) {
      if (i == 42) continue;
      ASSERT_TRUE(e->Get(Key(i), &v).ok()) << Key(i);
      EXPECT_EQ(v, Val(i));
    }
    int same_bucket = 0;
    int elsewhere = 0;
    for (int i = 0; i < 2000 && same_bucket < 3; ++i) {
      const std::string k = "never-written-" + std::to_string(i);
      s = e->Get(k, &v);
      if (BucketOf(k) == bucket) {
        EXPECT_TRUE(s.IsCorruption()) << k << ": " << s.ToString();
        ++same_bucket;
      } else {
        EXPECT_TRUE(s.IsNotFound()) << k << ": " << s.ToString();
        ++elsewhere;
      }
    }
    EXPECT_EQ(same_bucket, 3);
    EXPECT_GT(elsewhere, 50);
    // A Put of the key gives it a fresh entry, served from then on.
    ASSERT_TRUE(e->Put(Key(42), "fresh").ok());
    ASSERT_TRUE(e->Get(Key(42), &v).ok());
    EXPECT_EQ(v, "fresh");
  }
}

TEST_F(DamageTest, DamagedValueLeavesOtherKeysOfItsBucketAbsentNotCorrupt) {
  // An entry whose key and hash agree is another key's: a key never written that
  // falls into the same bucket is absent, not "maybe damaged".
  std::string img = pristine_;
  img[EntryOffset(42) + 40 + Key(42).size() + 5] ^= 0x20;  // inside the value
  WriteFile(path_, img);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
  std::string v;
  int same_bucket = 0;
  for (int i = 0; i < 2000 && same_bucket < 3; ++i) {
    const std::string k = "never-written-" + std::to_string(i);
    if (BucketOf(k) != BucketOf(Key(42))) continue;
    Status s = e->Get(k, &v);
    EXPECT_TRUE(s.IsNotFound()) << k << ": " << s.ToString();
    ++same_bucket;
  }
  EXPECT_EQ(same_bucket, 3);
  EXPECT_TRUE(e->Get(Key(42), &v).IsCorruption());
}

TEST_F(DamageTest, RemoveOfAKeyWhoseEntryMayBeDamagedIsCorruptionNotAbsent) {
  // Remove answered NotFound for the key of an entry with a damaged key (or key and hash),
  // which Get answers Corruption: the server's DEL said 0, "nothing was there".
  const size_t entry = EntryOffset(42);
  const uint64_t bucket = BucketOf(Key(42));
  int neighbour = -1;  // an intact key of the same chain
  for (int i = 0; i < kKeys && neighbour < 0; ++i) {
    if (i != 42 && BucketOf(Key(i)) == bucket) neighbour = i;
  }
  ASSERT_GE(neighbour, 0);
  std::string never_written;
  for (int i = 0; never_written.empty() && i < 2000; ++i) {
    const std::string k = "never-written-" + std::to_string(i);
    if (BucketOf(k) == bucket) never_written = k;
  }
  ASSERT_FALSE(never_written.empty());
  for (bool hash_too : {false, true}) {
    SCOPED_TRACE(hash_too ? "key and hash damaged" : "key damaged");
    std::string img = pristine_;
    img[entry + 40 + 2] ^= 0x01;              // "dmg-key-42" reads "dlg-key-42"
    if (hash_too) img[entry + 16 + 7] ^= 0x40;  // Entry::hash, its bucket bits unchanged
    WriteFile(path_, img);
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path_, Small(), &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = e->Remove(Key(42));
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(Key(42)), std::string::npos) << s.message();
    // Nothing was removed: the key still answers Corruption, the count is unchanged.
    std::string v = "untouched";
    EXPECT_TRUE(e->Get(Key(42), &v).IsCorruption());
    EXPECT_EQ(v, "untouched");
    EXPECT_TRUE(e->Exists(Key(42)).IsCorruption());
    EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
    // Any key that misses in the chain may be the damaged entry's, as for a Get.
    s = e->Remove(never_written);
    EXPECT_TRUE(s.IsCorruption()) << never_written << ": " << s.ToString();
    // An intact key of the same chain is found and removed.
    s = e->Remove(Key(neighbour));
    EXPECT_TRUE(s.ok()) << Key(neighbour) << ": " << s.ToString();
    EXPECT_FALSE(e->Get(Key(neighbour), &v).ok());
    EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 2));
    e.reset();
    ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
    EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 2));
    EXPECT_TRUE(e->Get(Key(42), &v).IsCorruption());
    e.reset();
    PmemCheckReport r = Check();
    EXPECT_EQ(r.entries_damaged, 1u);
    EXPECT_EQ(r.entries_ok, static_cast<uint64_t>(kKeys - 2));
  }
}

TEST_F(DamageTest, RemoveOfAKeyBesideAValueDamagedEntryIsNotFound) {
  // An entry whose key and hash agree is its key's alone: a Remove of a key never
  // written in its chain is NotFound, and a Remove of its own key drops it.
  std::string img = pristine_;
  img[EntryOffset(42) + 40 + Key(42).size() + 5] ^= 0x20;  // inside the value
  WriteFile(path_, img);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(path_, Small(), &e).ok());
  int same_bucket = 0;
  for (int i = 0; i < 2000 && same_bucket < 3; ++i) {
    const std::string k = "never-written-" + std::to_string(i);
    if (BucketOf(k) != BucketOf(Key(42))) continue;
    Status s = e->Remove(k);
    EXPECT_TRUE(s.IsNotFound()) << k << ": " << s.ToString();
    ++same_bucket;
  }
  EXPECT_EQ(same_bucket, 3);
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
  Status s = e->Remove(Key(42));
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::string v;
  EXPECT_TRUE(e->Get(Key(42), &v).IsNotFound());
  EXPECT_TRUE(e->Remove(Key(42)).IsNotFound());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys - 1));
}

TEST_F(DamageTest, ValueDamagedWhileOpenIsCaughtOnRead) {
  PmemOptions o = Small();
  o.verify_checksums = true;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(path_, o, &e).ok());
  // Damage the mapped file behind the engine's back (tmpfs: the mapping sees it).
  const size_t at = EntryOffset(3) + 40 + Key(3).size() + 2;
  int fd = open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = static_cast<char>(pristine_[at] ^ 0x08);
  ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(at)), 1);
  close(fd);
  std::string v;
  Status s = e->Get(Key(3), &v);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  e.reset();
  // Without read verification, recovery at the next open still catches it.
  o.verify_checksums = false;
  ASSERT_TRUE(OpenPmemEngine(path_, o, &e).ok());  // recovery still checks: quarantined
  EXPECT_TRUE(e->Get(Key(3), &v).IsCorruption());
}

TEST_F(DamageTest, TruncatedPoolsAreRefusedUnchanged) {
  for (size_t size : {pristine_.size() / 2, size_t{9} << 20, pristine_.size() - 4096,
                      size_t{4096}}) {
    Status s = ExpectRefusedUnchanged(pristine_.substr(0, size));
    EXPECT_TRUE(s.IsCorruption()) << size << ": " << s.ToString();
  }
  // Extended (a truncate upward) is as wrong as cut short.
  Status s = ExpectRefusedUnchanged(pristine_ + std::string(1 << 20, '\0'));
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST_F(DamageTest, EmptyAndMode000FilesAreClearErrors) {
  Status s = ExpectRefusedUnchanged("");
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.message();

  // What an older creator killed mid-way left behind: 0 bytes, mode 000.
  ASSERT_EQ(chmod(path_.c_str(), 0), 0);
  std::unique_ptr<Engine> e;
  s = OpenPmemEngine(path_, Small(), &e);
  if (geteuid() == 0) {  // root reads it anyway: it is still an empty file
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  } else {
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
  }
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_mode & 07777, 0u);
}

TEST_F(DamageTest, ForeignAndNonUtf8LayoutsAreOneLineErrors) {
  const std::string other = dir_.File("other");
  ASSERT_TRUE(CreatePoolWithLayout(other, "\xff\xfe-not-utf8\n", 0600)) << pmemobj_errormsg();
  std::string before = ReadFile(other);
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(other, Small(), &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(AllPrintableAscii(s.message())) << s.message();
  EXPECT_NE(s.message().find("\\xff\\xfe-not-utf8\\x0a"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadFile(other) == before);

  // A pool of the previous format names its version.
  const std::string v1 = dir_.File("v1");
  ASSERT_TRUE(CreatePoolWithLayout(v1, "nvmw-kv-1", 0600));
  before = ReadFile(v1);
  s = OpenPmemEngine(v1, Small(), &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("format version 1"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadFile(v1) == before);

  // Not a pool at all.
  WriteFile(path_, std::string(9 << 20, 'x'));
  s = OpenPmemEngine(path_, Small(), &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("PMEMOBJ"), std::string::npos) << s.message();
}

TEST(PmemSalvageTest, ASalvagePoolTooSmallIsKeptAndSaysItIsPartial) {
  constexpr int kEntries = 1024;
  TempDir dir;
  const std::string src = dir.File("big.pool");
  PmemOptions big;
  big.pool_size_bytes = 32ull << 20;
  big.bucket_count = 64;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(src, big, &e).ok());
  const std::string value(16 << 10, 'x');
  for (int i = 0; i < kEntries; ++i) ASSERT_TRUE(e->Put(Key(i), value).ok());  // 16 MiB
  e.reset();
  PmemCheckOptions co;
  co.salvage_path = dir.File("small.pool");
  co.salvage_options.pool_size_bytes = 8ull << 20;
  co.salvage_options.bucket_count = 64;
  PmemCheckReport r;
  Status s = CheckPmemPool(src, co, &r);
  ASSERT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_GT(r.salvaged, 0u);
  EXPECT_LT(r.salvaged, static_cast<uint64_t>(kEntries));
  EXPECT_NE(s.message().find("kept, holding only the " + std::to_string(r.salvaged) + " entries"),
            std::string::npos) << s.message();
  // What the message promises is there: the partial pool opens and holds those entries.
  std::unique_ptr<Engine> out;
  PmemOptions reopen = co.salvage_options;
  reopen.create_if_missing = false;
  ASSERT_TRUE(OpenPmemEngine(co.salvage_path, reopen, &out).ok());
  uint64_t found = 0;
  std::string v;
  for (int i = 0; i < kEntries; ++i) found += out->Get(Key(i), &v).ok() && v == value;
  EXPECT_EQ(found, r.salvaged);
}

TEST(PmemCreationTest, ACreationTheFilesystemRefusesNamesThePoolNotItsTemporaryFile) {
  TempDir dir;
  const std::string path = dir.File("huge.pool");
  PmemOptions o;
  o.pool_size_bytes = uint64_t{1} << 62;  // more than any filesystem here holds
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(path, o, &e);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find(".creating-"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind(path + ": cannot create pool: ", 0), 0u) << s.message();
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

TEST(PmemCreationTest, NewPoolsAre0600UnlessConfigured) {
  TempDir dir;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(dir.File("a"), Small(), &e).ok());
  e.reset();
  struct stat st;
  ASSERT_EQ(stat(dir.File("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  PmemOptions o = Small();
  o.file_mode = 0640;
  mode_t old_mask = umask(022);
  ASSERT_TRUE(OpenPmemEngine(dir.File("b"), o, &e).ok());
  umask(old_mask);
  e.reset();
  ASSERT_EQ(stat(dir.File("b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// A creator killed at a random moment leaves either no pool or a complete one at
// the path, never a file a later open calls corrupt.
TEST(PmemCreationTest, KilledCreatorNeverLeavesAHalfPool) {
  TempDir dir;
  const std::string path = dir.File("pool");
  std::mt19937_64 rng(5);
  int complete = 0;
  for (int round = 0; round < 12; ++round) {
    unlink(path.c_str());
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      PmemOptions o = Small();
      o.pool_size_bytes = 64ull << 20;
      o.bucket_count = 1 << 16;
      std::unique_ptr<Engine> e;
      _exit(OpenPmemEngine(path, o, &e).ok() ? 0 : 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    kill(pid, SIGKILL);
    int ws = 0;
    ASSERT_EQ(waitpid(pid, &ws, 0), pid);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;  // killed before the pool was linked in
    ++complete;
    PmemOptions o = Small();
    o.create_if_missing = false;
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path, o, &e);
    EXPECT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
  }
  // The next creation removes temporaries of dead creators.
  unlink(path.c_str());
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(OpenPmemEngine(path, Small(), &e).ok());
  int temps = 0;
  for (const auto& ent : std::filesystem::directory_iterator(dir.path())) {
    if (ent.path().filename().string().find(".creating-") != std::string::npos) ++temps;
  }
  EXPECT_EQ(temps, 0);
  std::printf("killed creators: %d of 12 had linked a complete pool\n", complete);
}

// Several processes create the same pool at once: one creates it, the others
// open it (waiting while it is held open); none calls it corrupt.
TEST(PmemCreationTest, ConcurrentCreatorsShareOnePool) {
  TempDir dir;
  const std::string path = dir.File("pool");
  constexpr int kProcs = 4;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < deadline) {
        std::unique_ptr<Engine> e;
        Status s = OpenPmemEngine(path, Small(), &e);
        if (s.ok()) _exit(e->Put("creator-" + std::to_string(p), "here").ok() ? 0 : 3);
        if (!s.IsIOError()) {
          std::fprintf(stderr, "creator %d: %s\n", p, s.ToString().c_str());
          _exit(2);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // held open by another
      }
      _exit(4);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int ws = 0;
    ASSERT_EQ(waitpid(pid, &ws, 0), pid);
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "status " << ws;
  }
  std::unique_ptr<Engine> e;
  PmemOptions o = Small();
  o.create_if_missing = false;
  ASSERT_TRUE(OpenPmemEngine(path, o, &e).ok());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kProcs));
}

}  // namespace
}  // namespace nvmw
