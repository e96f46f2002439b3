// Engine tests: one parameterised suite run against both engines (the contract
// in include/nvmw/engine.h), then pmem-only tests for persistence and bad files.
#include "nvmw/engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <libpmemobj.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/pmem_engine_impl.h"
#include "engine_test_util.h"

namespace nvmw {
namespace {

using test::CheckValue;
using test::CreatePoolWithLayout;
using test::MakeValue;
using test::ReadFile;
using test::TempDir;
using test::WriteFile;

constexpr uint32_t kMaxKey = 1024;
constexpr uint64_t kMaxValue = 64ull << 20;

PmemOptions SmallPmemOptions(uint64_t pool_bytes = 256ull << 20) {
  PmemOptions o;
  o.pool_size_bytes = pool_bytes;
  o.bucket_count = 1024;
  o.max_key_bytes = kMaxKey;
  o.max_value_bytes = kMaxValue;
  return o;
}

// ---------------------------------------------------------------------------
// Contract tests, both engines.

class EngineContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp under /dev/shm failed";
    if (GetParam() == "memory") {
      MemoryOptions o;
      o.max_key_bytes = kMaxKey;
      o.max_value_bytes = kMaxValue;
      engine_ = NewMemoryEngine(o);
    } else {
      Status s = OpenPmemEngine(dir_.File("pool"), SmallPmemOptions(), &engine_);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    ASSERT_EQ(engine_->Name(), GetParam());
  }

  std::string MustGet(std::string_view key) {
    std::string v;
    Status s = engine_->Get(key, &v);
    EXPECT_TRUE(s.ok()) << "key " << key << ": " << s.ToString();
    return v;
  }

  TempDir dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(EngineContractTest, PutGetOverwriteRemoveExistsCount) {
  EXPECT_EQ(engine_->Count(), 0u);
  std::string v = "unchanged";
  EXPECT_TRUE(engine_->Get("a", &v).IsNotFound());
  EXPECT_EQ(v, "unchanged");  // NotFound leaves the output alone
  EXPECT_TRUE(engine_->Exists("a").IsNotFound());

  ASSERT_TRUE(engine_->Put("a", "1").ok());
  ASSERT_TRUE(engine_->Put("b", "22").ok());
  EXPECT_EQ(engine_->Count(), 2u);
  EXPECT_EQ(MustGet("a"), "1");
  EXPECT_EQ(MustGet("b"), "22");
  EXPECT_TRUE(engine_->Exists("b").ok());

  ASSERT_TRUE(engine_->Put("a", "one, longer this time").ok());
  EXPECT_EQ(engine_->Count(), 2u);  // overwrite does not add a key
  EXPECT_EQ(MustGet("a"), "one, longer this time");

  EXPECT_TRUE(engine_->Remove("a").ok());
  EXPECT_TRUE(engine_->Remove("a").IsNotFound());
  EXPECT_TRUE(engine_->Exists("a").IsNotFound());
  EXPECT_TRUE(engine_->Get("a", &v).IsNotFound());
  EXPECT_EQ(engine_->Count(), 1u);
  EXPECT_EQ(MustGet("b"), "22");

  ASSERT_TRUE(engine_->Put("a", "back").ok());
  EXPECT_EQ(MustGet("a"), "back");
  EXPECT_EQ(engine_->Count(), 2u);
}

TEST_P(EngineContractTest, ZeroCopyGetCallsOnceOrNever) {
  ASSERT_TRUE(engine_->Put("k", "value").ok());
  int calls = 0;
  std::string seen;
  ASSERT_TRUE(engine_->Get("k", [&](std::string_view v) { ++calls; seen = v; }).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, "value");
  EXPECT_TRUE(engine_->Get("missing", [&](std::string_view) { ++calls; }).IsNotFound());
  EXPECT_EQ(calls, 1);
}

TEST_P(EngineContractTest, EmptyValue) {
  ASSERT_TRUE(engine_->Put("empty", "").ok());
  EXPECT_TRUE(engine_->Exists("empty").ok());
  std::string v = "x";
  ASSERT_TRUE(engine_->Get("empty", &v).ok());
  EXPECT_EQ(v, "");
  ASSERT_TRUE(engine_->Put("empty", "now full").ok());
  EXPECT_EQ(MustGet("empty"), "now full");
  ASSERT_TRUE(engine_->Put("empty", "").ok());
  EXPECT_EQ(MustGet("empty"), "");
  EXPECT_EQ(engine_->Count(), 1u);
}

TEST_P(EngineContractTest, BinaryKeysAndValues) {
  std::string all_bytes;
  for (int c = 0; c < 256; ++c) all_bytes.push_back(static_cast<char>(c));
  const std::string k1("\0", 1), k2("\0\0", 2), k3("a\0b", 3), k4("a\0c", 3);
  ASSERT_TRUE(engine_->Put(k1, all_bytes).ok());
  ASSERT_TRUE(engine_->Put(k2, std::string("\0\xff\0", 3)).ok());
  ASSERT_TRUE(engine_->Put(k3, "b").ok());
  ASSERT_TRUE(engine_->Put(k4, "c").ok());
  ASSERT_TRUE(engine_->Put(all_bytes, k3).ok());
  EXPECT_EQ(engine_->Count(), 5u);
  EXPECT_EQ(MustGet(k1), all_bytes);
  EXPECT_EQ(MustGet(k2), std::string("\0\xff\0", 3));
  EXPECT_EQ(MustGet(k3), "b");  // keys differing after a NUL are distinct
  EXPECT_EQ(MustGet(k4), "c");
  EXPECT_EQ(MustGet(all_bytes), k3);
  EXPECT_TRUE(engine_->Exists(std::string("a\0", 2)).IsNotFound());
}

TEST_P(EngineContractTest, ManyKeysOverwritesAndRemovals) {
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::string k = "key" + std::to_string(i);
    ASSERT_TRUE(engine_->Put(k, MakeValue(k, 1, 32 + i % 200)).ok());
  }
  for (int i = 0; i < n; i += 2) {
    std::string k = "key" + std::to_string(i);
    ASSERT_TRUE(engine_->Put(k, MakeValue(k, 2, 40 + i % 5000)).ok());
  }
  for (int i = 0; i < n; i += 3) ASSERT_TRUE(engine_->Remove("key" + std::to_string(i)).ok());
  uint64_t expected = 0;
  for (int i = 0; i < n; ++i) {
    std::string k = "key" + std::to_string(i), v;
    Status s = engine_->Get(k, &v);
    if (i % 3 == 0) {
      EXPECT_TRUE(s.IsNotFound()) << k;
      continue;
    }
    ++expected;
    ASSERT_TRUE(s.ok()) << k;
    uint64_t version = 0;
    ASSERT_TRUE(CheckValue(k, v, &version)) << k;
    EXPECT_EQ(version, i % 2 == 0 ? 2u : 1u) << k;
  }
  EXPECT_EQ(engine_->Count(), expected);
}

TEST_P(EngineContractTest, LargeValues) {
  for (size_t len : {size_t{4095}, size_t{4096}, size_t{800 * 1024}, size_t{16} << 20}) {
    std::string k = "large" + std::to_string(len);
    std::string v = MakeValue(k, len, len);
    ASSERT_TRUE(engine_->Put(k, v).ok()) << len;
    std::string got;
    ASSERT_TRUE(engine_->Get(k, &got).ok());
    EXPECT_TRUE(got == v) << "value of " << len << " bytes differs";
  }
  // Replace a large value by a small one and back.
  ASSERT_TRUE(engine_->Put("large4096", "tiny").ok());
  EXPECT_EQ(MustGet("large4096"), "tiny");
  EXPECT_EQ(engine_->Count(), 4u);
}

TEST_P(EngineContractTest, BadInputIsRejectedAndChangesNothing) {
  ASSERT_TRUE(engine_->Put("k", "v").ok());
  std::string v;
  EXPECT_TRUE(engine_->Put("", "v").IsInvalidArgument());
  EXPECT_TRUE(engine_->Get("", &v).IsInvalidArgument());
  EXPECT_TRUE(engine_->Remove("").IsInvalidArgument());
  EXPECT_TRUE(engine_->Exists("").IsInvalidArgument());

  std::string big_key(kMaxKey + 1, 'k');
  Status s = engine_->Put(big_key, "v");
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(kMaxKey)), std::string::npos) << s.message();
  EXPECT_TRUE(engine_->Get(big_key, &v).IsInvalidArgument());
  EXPECT_TRUE(engine_->Put(std::string(kMaxKey, 'k'), "at the limit").ok());

  std::string big_value(kMaxValue + 1, 'v');
  s = engine_->Put("k", big_value);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(MustGet("k"), "v");  // the old value survives a rejected Put
  EXPECT_EQ(engine_->Count(), 2u);
}

// Writers overwrite a small key set with self-describing values of random sizes
// (some above the 4 KB large-value path) while readers check every value they
// see: a torn or mixed value would fail its checksum.
TEST_P(EngineContractTest, ConcurrentReadersAndWritersSeeNoTornValues) {
  const int kKeys = 32, kWriters = 2, kReaders = 2, kWritesPerWriter = 3000;
  auto key = [](int i) { return "ck" + std::to_string(i); };
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(engine_->Put(key(i), MakeValue(key(i), 0, 64)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, missing{0}, errors{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<int> readers_running{0};  // writers start once every reader has read once
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      while (readers_running.load() < kReaders) std::this_thread::yield();
      std::mt19937_64 rng(w + 1);
      for (int n = 1; n <= kWritesPerWriter; ++n) {
        int i = static_cast<int>(rng() % kKeys);
        size_t len = 32 + rng() % (rng() % 8 == 0 ? 20000 : 300);
        if (!engine_->Put(key(i), MakeValue(key(i), n, len)).ok()) errors.fetch_add(1);
        if (n % 500 == 0) {  // a removal races with readers too
          if (engine_->Remove(key(i)).ok()) {
            engine_->Put(key(i), MakeValue(key(i), n, 48));
          }
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      bool counted = false;
      while (!stop.load(std::memory_order_relaxed)) {
        int i = static_cast<int>(rng() % kKeys);
        std::string k = key(i);
        Status s = engine_->Get(k, [&](std::string_view v) {
          if (!CheckValue(k, v, nullptr)) bad.fetch_add(1);
        });
        if (s.IsNotFound()) {
          missing.fetch_add(1);  // allowed only in the Remove/Put window
        } else if (!s.ok()) {
          errors.fetch_add(1);
        }
        reads.fetch_add(1, std::memory_order_relaxed);
        if (!counted) {
          readers_running.fetch_add(1);
          counted = true;
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  stop = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(engine_->Count(), static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(CheckValue(key(i), MustGet(key(i)), nullptr));
}

INSTANTIATE_TEST_SUITE_P(BothEngines, EngineContractTest, ::testing::Values("memory", "pmem"),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------
// PmemEngine only: persistence, recovery and bad pool files.

class PmemEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }
  Status Open(const PmemOptions& o, std::unique_ptr<Engine>* e, const std::string& name = "pool") {
    return OpenPmemEngine(dir_.File(name), o, e);
  }
  TempDir dir_;
};

TEST_F(PmemEngineTest, PersistsAcrossCloseAndReopen) {
  PmemOptions o = SmallPmemOptions();
  o.bucket_count = 4;  // long chains: removal and replacement in the middle of one
  std::map<std::string, std::string> expected;
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Open(o, &e).ok());
    for (int i = 0; i < 2000; ++i) {
      std::string k = "p" + std::to_string(i);
      expected[k] = MakeValue(k, 1, 32 + (i * 37) % 9000);
      ASSERT_TRUE(e->Put(k, expected[k]).ok());
    }
    for (int i = 0; i < 2000; i += 5) {
      std::string k = "p" + std::to_string(i);
      ASSERT_TRUE(e->Remove(k).ok());
      expected.erase(k);
    }
    for (int i = 1; i < 2000; i += 5) {
      std::string k = "p" + std::to_string(i);
      expected[k] = MakeValue(k, 2, 100);
      ASSERT_TRUE(e->Put(k, expected[k]).ok());
    }
    ASSERT_TRUE(e->Put("empty", "").ok());
    expected["empty"] = "";
  }
  for (int round = 0; round < 2; ++round) {
    o.prefault = round == 1;  // populating the mapping must not change any byte
    std::unique_ptr<Engine> e;
    Status s = Open(o, &e);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(e->Count(), expected.size());
    for (const auto& [k, v] : expected) {
      std::string got;
      ASSERT_TRUE(e->Get(k, &got).ok()) << k;
      EXPECT_TRUE(got == v) << k;
    }
    EXPECT_TRUE(e->Exists("p0").IsNotFound());
  }
}

// KiB of the mapping of `path` that the kernel maps with 2 MiB pages, from
// /proc/self/smaps (ShmemPmdMapped on tmpfs, FilePmdMapped elsewhere); -1 when the
// file is not mapped.
long HugeMappedKiB(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  long kib = -1;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find(" rw") != std::string::npos) {
      in = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
      if (in && kib < 0) kib = 0;
      continue;
    }
    if (!in) continue;
    std::istringstream fields(line);
    std::string name;
    long value = 0;
    fields >> name >> value;
    if (name == "ShmemPmdMapped:" || name == "FilePmdMapped:") kib += value;
  }
  return kib;
}

// Whether this kernel moves a tmpfs file's pages to a 2 MiB page on request (Linux
// 6.1+ with transparent huge pages built in): the premise of the test below.
bool KernelCollapsesTmpfs(const std::string& dir) {
  const std::string path = dir + "/collapse-probe";
  constexpr size_t kHuge = 2u << 20;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  bool ok = false;
  const std::string data(kHuge, 'x');
  // The file mapped at a 2 MiB-aligned address, inside a reservation twice its size.
  void* room = ::mmap(nullptr, 2 * kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (::pwrite(fd, data.data(), kHuge, 0) == static_cast<ssize_t>(kHuge) && room != MAP_FAILED) {
    void* at = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(room) + kHuge - 1) & ~uintptr_t{kHuge - 1});
    void* p = ::mmap(at, kHuge, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    ok = p == at && ::madvise(at, kHuge, 25 /* MADV_COLLAPSE */) == 0;
  }
  if (room != MAP_FAILED) ::munmap(room, 2 * kHuge);
  ::close(fd);
  ::unlink(path.c_str());
  return ok;
}

TEST_F(PmemEngineTest, PoolMovesToHugePagesWhileServingAndKeepsEveryByte) {
  if (!KernelCollapsesTmpfs(dir_.path())) {
    GTEST_SKIP() << "this kernel cannot move tmpfs pages to 2 MiB pages (MADV_COLLAPSE)";
  }
  const std::string path = dir_.File("pool");
  PmemOptions o = SmallPmemOptions(64ull << 20);
  std::map<std::string, std::string> expected;
  {
    o.huge_pages = false;  // the pool as libpmem creates it: 4 KiB pages
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Open(o, &e).ok());
    for (int i = 0; i < 3000; ++i) {
      std::string k = "h" + std::to_string(i);
      expected[k] = MakeValue(k, 1, 100 + (i * 131) % 2000);
      ASSERT_TRUE(e->Put(k, expected[k]).ok());
    }
    EXPECT_EQ(HugeMappedKiB(path), 0);
    EXPECT_EQ(static_cast<pmem_internal::PmemEngine*>(e.get())->WaitHugePages(), 0u);
  }
  o.huge_pages = true;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  // Writers and readers run while the pages move under them.
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread writer([&] {
    for (int round = 2; !stop.load(); ++round) {
      for (int i = 0; i < 3000 && !stop.load(); i += 7) {
        std::string k = "h" + std::to_string(i);
        Status s = e->Put(k, MakeValue(k, round, 100 + (i * 131) % 2000));
        if (!s.ok()) {
          ADD_FAILURE() << k << ": " << s.ToString();
          bad.fetch_add(1);
        }
      }
    }
  });
  std::thread reader([&] {
    while (!stop.load()) {
      for (int i = 1; i < 3000 && !stop.load(); i += 7) {  // keys the writer leaves alone
        std::string k = "h" + std::to_string(i), got;
        Status s = e->Get(k, &got);
        if (!s.ok() || got != expected.at(k)) {
          ADD_FAILURE() << k << ": " << s.ToString() << ", " << got.size() << " bytes";
          bad.fetch_add(1);
        }
      }
    }
  });
  const uint64_t moved = static_cast<pmem_internal::PmemEngine*>(e.get())->WaitHugePages();
  stop.store(true);
  writer.join();
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(moved, 0u);
  EXPECT_GE(HugeMappedKiB(path), static_cast<long>(moved / 1024));
  for (int i = 0; i < 3000; ++i) {
    std::string k = "h" + std::to_string(i), got;
    ASSERT_TRUE(e->Get(k, &got).ok()) << k;
    if (i % 7 != 0) {
      EXPECT_TRUE(got == expected[k]) << k;
    } else {
      EXPECT_TRUE(CheckValue(k, got, nullptr)) << k;  // some round of the writer, whole
    }
  }
  e.reset();
  ASSERT_TRUE(Open(o, &e).ok());  // and the file reopens with the same contents
  EXPECT_EQ(e->Count(), expected.size());
}

TEST_F(PmemEngineTest, BucketCountIsFixedAtCreation) {
  PmemOptions o = SmallPmemOptions();
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Open(o, &e).ok());
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(e->Put("b" + std::to_string(i), "v").ok());
  }
  o.bucket_count = 7;  // a different count on reopen must not rehash anything
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  EXPECT_EQ(e->Count(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_TRUE(e->Exists("b" + std::to_string(i)).ok());
}

TEST_F(PmemEngineTest, MissingDirectoryIsIOErrorNamingThePath) {
  std::unique_ptr<Engine> e;
  std::string path = dir_.path() + "/no/such/dir/pool";
  Status s = OpenPmemEngine(path, SmallPmemOptions(), &e);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_EQ(e, nullptr);
}

TEST_F(PmemEngineTest, MissingFileWithoutCreateIsNotFound) {
  PmemOptions o = SmallPmemOptions();
  o.create_if_missing = false;
  std::unique_ptr<Engine> e;
  Status s = Open(o, &e);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  struct stat st;
  EXPECT_NE(stat(dir_.File("pool").c_str(), &st), 0);  // and nothing was created
}

TEST_F(PmemEngineTest, ForeignFilesAreCorruptionAndLeftUntouched) {
  const std::string text = dir_.File("notes.txt");
  WriteFile(text, "this is a text file, not a pool\n");
  std::mt19937_64 rng(7);
  std::string noise(12 << 20, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  const std::string big = dir_.File("noise.bin");
  WriteFile(big, noise);
  const std::string zeros = dir_.File("zeros.bin");
  WriteFile(zeros, std::string(10 << 20, '\0'));

  for (const std::string& path : {text, big, zeros}) {
    std::string before = ReadFile(path);
    std::unique_ptr<Engine> e;
    Status s = OpenPmemEngine(path, SmallPmemOptions(), &e);
    EXPECT_TRUE(s.IsCorruption()) << path << ": " << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    EXPECT_TRUE(ReadFile(path) == before) << path << " was modified";
  }
}

TEST_F(PmemEngineTest, PoolWithAnotherLayoutIsCorruption) {
  const std::string path = dir_.File("other");
  ASSERT_TRUE(CreatePoolWithLayout(path, "someone-else-1", 0666)) << pmemobj_errormsg();
  std::string before = ReadFile(path);
  std::unique_ptr<Engine> e;
  Status s = OpenPmemEngine(path, SmallPmemOptions(), &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_TRUE(ReadFile(path) == before);
}

TEST_F(PmemEngineTest, DamagedPoolIsAClearErrorNotACrash) {
  const std::string path = dir_.File("pool");
  PmemOptions o = SmallPmemOptions(32ull << 20);
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Open(o, &e).ok());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(e->Put("d" + std::to_string(i), "value").ok());
  }
  const std::string pristine = ReadFile(path);

  // Scribbled pool header.
  std::string scribbled = pristine;
  for (size_t i = 100; i < 400; ++i) scribbled[i] = static_cast<char>(i * 31);
  WriteFile(path, scribbled);
  std::unique_ptr<Engine> e;
  Status s = Open(o, &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_TRUE(ReadFile(path) == scribbled) << "a refused pool was modified";

  // Scribbled layout name: refused before pmemobj touches the file.
  scribbled = pristine;
  scribbled[4096] = 'X';
  WriteFile(path, scribbled);
  s = Open(o, &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(ReadFile(path) == scribbled) << "a refused pool was modified";

  // Truncated pool (half its size), then a pool cut below the minimum size.
  WriteFile(path, pristine.substr(0, pristine.size() / 2));
  s = Open(o, &e);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption() || s.IsIOError()) << s.ToString();
  WriteFile(path, pristine.substr(0, 4096));
  s = Open(o, &e);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();

  // The untouched image still opens with every key.
  WriteFile(path, pristine);
  s = Open(o, &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e->Count(), 100u);
}

TEST_F(PmemEngineTest, SecondOpenOfAnOpenPoolIsRefused) {
  std::unique_ptr<Engine> a, b;
  ASSERT_TRUE(Open(SmallPmemOptions(), &a).ok());
  Status s = Open(SmallPmemOptions(), &b);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  ASSERT_TRUE(a->Put("still", "works").ok());
}

// Fill a small pool until NoSpace: every acknowledged value must still read
// back, a failed overwrite keeps the old value, and after a removal frees space
// the store accepts writes again (also after reopen).
TEST_F(PmemEngineTest, PoolFullIsNoSpaceAndLosesNothing) {
  PmemOptions o = SmallPmemOptions(16ull << 20);
  o.bucket_count = 256;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  std::vector<std::string> keys;
  Status s;
  for (int i = 0; i < 100000; ++i) {
    std::string k = "full" + std::to_string(i);
    s = e->Put(k, MakeValue(k, 1, 48 * 1024 + i % 1000));
    if (!s.ok()) break;
    keys.push_back(k);
  }
  ASSERT_TRUE(s.IsNoSpace()) << s.ToString();
  ASSERT_GT(keys.size(), 50u);
  EXPECT_EQ(e->Count(), keys.size());
  // An overwrite that needs more room than is left fails and keeps the old value.
  s = e->Put(keys[0], MakeValue(keys[0], 2, 8 << 20));
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  for (const std::string& k : keys) {
    std::string v;
    uint64_t version = 0;
    ASSERT_TRUE(e->Get(k, &v).ok()) << k;
    ASSERT_TRUE(CheckValue(k, v, &version)) << k;
    EXPECT_EQ(version, 1u) << k;
  }
  ASSERT_TRUE(e->Remove(keys[1]).ok());
  ASSERT_TRUE(e->Remove(keys[2]).ok());
  ASSERT_TRUE(e->Put("after", MakeValue("after", 3, 48 * 1024)).ok());
  e.reset();
  ASSERT_TRUE(Open(o, &e).ok());
  EXPECT_EQ(e->Count(), keys.size() - 1);
  std::string v;
  ASSERT_TRUE(e->Get("after", &v).ok());
  EXPECT_TRUE(CheckValue("after", v, nullptr));
}

TEST_F(PmemEngineTest, Value256MB) {
  PmemOptions o = SmallPmemOptions(700ull << 20);
  o.max_value_bytes = 1ull << 30;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  const size_t len = 256ull << 20;
  std::string v(len, '\0');
  for (size_t i = 0; i < len; i += 4096) v[i] = static_cast<char>(i >> 12);
  v[len - 1] = 'z';
  ASSERT_TRUE(e->Put("huge", v).ok());
  {
    bool same = false;
    ASSERT_TRUE(e->Get("huge", [&](std::string_view got) { same = got == v; }).ok());
    EXPECT_TRUE(same);
  }
  e.reset();
  ASSERT_TRUE(Open(o, &e).ok());
  bool same = false;
  ASSERT_TRUE(e->Get("huge", [&](std::string_view got) { same = got == v; }).ok());
  EXPECT_TRUE(same);
  ASSERT_TRUE(e->Remove("huge").ok());
  EXPECT_EQ(e->Count(), 0u);
}

}  // namespace
}  // namespace nvmw
