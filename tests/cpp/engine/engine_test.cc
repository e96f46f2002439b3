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

// What the readers of StartCheckingReaders saw.
struct ReaderCounts {
  std::atomic<int> bad{0};      // a value that is not its key's (torn or mixed)
  std::atomic<int> missing{0};  // NotFound
  std::atomic<int> errors{0};   // any other error
  std::atomic<int> running{0};  // readers that have read once
  std::atomic<uint64_t> reads{0};
};

// Starts `n` threads that, until *stop, Get random keys key(0 .. keys-1) and check each
// value against its key (the values are MakeValue's, self-describing).
void StartCheckingReaders(Engine* engine, int n, int keys, std::string (*key)(int),
                          const std::atomic<bool>* stop, ReaderCounts* counts,
                          std::vector<std::thread>* threads) {
  for (int r = 0; r < n; ++r) {
    threads->emplace_back([=] {
      std::mt19937_64 rng(100 + r);
      bool counted = false;
      while (!stop->load(std::memory_order_relaxed)) {
        std::string k = key(static_cast<int>(rng() % keys));
        Status s = engine->Get(k, [&](std::string_view v) {
          if (!CheckValue(k, v, nullptr)) counts->bad.fetch_add(1);
        });
        if (s.IsNotFound()) {
          counts->missing.fetch_add(1);
        } else if (!s.ok()) {
          counts->errors.fetch_add(1);
        }
        counts->reads.fetch_add(1, std::memory_order_relaxed);
        if (!counted) {
          counts->running.fetch_add(1);
          counted = true;
        }
      }
    });
  }
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
  auto key = [](int i) -> std::string { return "ck" + std::to_string(i); };
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(engine_->Put(key(i), MakeValue(key(i), 0, 64)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  ReaderCounts readers;  // writers start once every reader has read once (NotFound is
                         // allowed only in the Remove/Put window)
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      while (readers.running.load() < kReaders) std::this_thread::yield();
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
  StartCheckingReaders(engine_.get(), kReaders, kKeys, key, &stop, &readers, &threads);
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  stop = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(readers.bad.load(), 0);
  EXPECT_EQ(errors.load() + readers.errors.load(), 0);
  EXPECT_GT(readers.reads.load(), 0u);
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

// ---------------------------------------------------------------------------
// PutMany: results item by item, as Put would give them; several groups per call.

namespace nvmw {
namespace {

// Items of one PutMany call; the views handed to the engine point into here.
class Batch {
 public:
  void Add(std::string key, std::string value) {
    keys_.push_back(std::move(key));
    values_.push_back(std::move(value));
  }
  size_t size() const { return keys_.size(); }
  const std::string& key(size_t i) const { return keys_[i]; }
  const std::string& value(size_t i) const { return values_[i]; }

  // Every result starts as a status no engine returns for a Put, so an item the
  // engine skipped is seen.
  std::vector<Status> Run(Engine* engine) const {
    std::vector<KeyValue> items;
    for (size_t i = 0; i < keys_.size(); ++i) items.push_back(KeyValue{keys_[i], values_[i]});
    std::vector<Status> results(items.size(), Status::NotSupported("result not set"));
    engine->PutMany(items.data(), items.size(), results.data());
    return results;
  }

 private:
  std::vector<std::string> keys_, values_;
};

// `len` bytes derived from (key, version): MakeValue's self-describing form from 32
// bytes on, a plain pattern below (PutMany must store short and empty values too).
std::string Payload(std::string_view key, uint64_t version, size_t len) {
  if (len >= test::kMinSelfDescribing) return MakeValue(key, version, len);
  std::string v(len, '\0');
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<char>(test::Fnv1a(key) + version * 7 + i);
  return v;
}

// Expects every item of `b` to hold exactly its value in `e` (later items win).
void ExpectStored(Engine* e, const Batch& b, const char* when) {
  std::map<std::string, std::string> last;
  for (size_t i = 0; i < b.size(); ++i) last[b.key(i)] = b.value(i);
  for (const auto& [k, v] : last) {
    std::string got;
    Status s = e->Get(k, &got);
    ASSERT_TRUE(s.ok()) << when << ": " << k << ": " << s.ToString();
    EXPECT_TRUE(got == v) << when << ": " << k << " holds " << got.size() << " bytes, not its "
                          << v.size() << "-byte value";
  }
}

class PutManyTest : public EngineContractTest {};

TEST_P(PutManyTest, ManyNewKeysInSeveralGroups) {
  ASSERT_TRUE(engine_->Put("before", "old").ok());
  engine_->PutMany(nullptr, 0, nullptr);  // an empty call is allowed and changes nothing
  EXPECT_EQ(engine_->Count(), 1u);
  Batch b;
  const size_t n = 5 * kPutGroupMax + 3;
  for (size_t i = 0; i < n; ++i) {
    std::string k = "m" + std::to_string(i);
    b.Add(k, MakeValue(k, i + 1, 32 + (i * 37) % 700));
  }
  std::vector<Status> results = b.Run(engine_.get());
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
  EXPECT_EQ(engine_->Count(), n + 1);
  ExpectStored(engine_.get(), b, "after PutMany");
  EXPECT_EQ(MustGet("before"), "old");
}

TEST_P(PutManyTest, OverwritesMixedWithNewKeys) {
  for (int i = 0; i < 30; ++i) {
    std::string k = "o" + std::to_string(i);
    ASSERT_TRUE(engine_->Put(k, MakeValue(k, 1, 100)).ok());
  }
  Batch b;  // o0..o19 overwritten (other sizes), 20 new keys in between
  for (int i = 0; i < 20; ++i) {
    std::string k = "o" + std::to_string(i), fresh = "new" + std::to_string(i);
    b.Add(k, MakeValue(k, 2, 40 + i * 13));
    b.Add(fresh, MakeValue(fresh, 2, 200 - i));
  }
  std::vector<Status> results = b.Run(engine_.get());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(results[i].ok()) << b.key(i);
  EXPECT_EQ(engine_->Count(), 50u);  // 30 old keys + 20 new: overwrites add none
  ExpectStored(engine_.get(), b, "after PutMany");
  for (int i = 20; i < 30; ++i) {
    std::string k = "o" + std::to_string(i);
    EXPECT_TRUE(MustGet(k) == MakeValue(k, 1, 100)) << k;
  }
}

TEST_P(PutManyTest, KeyGivenTwiceEndsWithItsLaterValue) {
  Batch b;
  b.Add("a", "first");
  b.Add("b", "b");
  b.Add("a", "second");
  b.Add("a", "third, adjacent");
  b.Add("d", "d was here");
  for (int i = 0; i < static_cast<int>(kPutGroupMax) + 1; ++i) b.Add("f" + std::to_string(i), "f");
  b.Add("d", "");  // and again a group or more later, now empty
  b.Add("a", "final");
  std::vector<Status> results = b.Run(engine_.get());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << b.key(i);
  EXPECT_EQ(MustGet("a"), "final");
  EXPECT_EQ(MustGet("b"), "b");
  EXPECT_EQ(MustGet("d"), "");
  EXPECT_EQ(engine_->Count(), 3u + kPutGroupMax + 1);
  // The same key many times in one call, as many times as a group could hold and more.
  Batch again;
  for (int i = 0; i < 20; ++i) again.Add("a", "a" + std::to_string(i));
  results = again.Run(engine_.get());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(results[i].ok()) << i;
  EXPECT_EQ(MustGet("a"), "a19");
  EXPECT_EQ(engine_->Count(), 3u + kPutGroupMax + 1);
}

TEST_P(PutManyTest, InvalidItemsFailAloneAndTheOthersAreStored) {
  ASSERT_TRUE(engine_->Put("keep", "old").ok());
  const std::string big_key(kMaxKey + 1, 'k');
  Batch b;
  std::vector<bool> bad;
  auto good = [&](int i) {
    std::string k = "ok" + std::to_string(i);
    b.Add(k, MakeValue(k, 1, 64));
    bad.push_back(false);
  };
  auto invalid = [&](std::string k, std::string v) {
    b.Add(std::move(k), std::move(v));
    bad.push_back(true);
  };
  good(0);
  invalid("", "value of an empty key");
  good(1);
  invalid(big_key, "value of an oversized key");
  good(2);
  invalid("keep", std::string(kMaxValue + 1, 'v'));  // an existing key keeps its value
  for (int i = 3; i < 13; ++i) good(i);  // more than a group after the invalid ones
  invalid("", "");
  std::vector<Status> results = b.Run(engine_.get());
  for (size_t i = 0; i < b.size(); ++i) {
    if (bad[i]) {
      EXPECT_TRUE(results[i].IsInvalidArgument()) << i << ": " << results[i].ToString();
    } else {
      EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
    }
  }
  EXPECT_EQ(MustGet("keep"), "old");
  std::string v;
  EXPECT_TRUE(engine_->Get(big_key, &v).IsInvalidArgument());
  EXPECT_EQ(engine_->Count(), 14u);
  for (int i = 0; i < 13; ++i) {
    std::string k = "ok" + std::to_string(i);
    EXPECT_TRUE(MustGet(k) == MakeValue(k, 1, 64)) << k;
  }
}

// Values from 4096 bytes on take the aligned non-temporal path, the others a plain
// copy; both kinds in one group, then each key's size class swapped.
TEST_P(PutManyTest, LargeAndSmallValuesTogether) {
  const std::vector<size_t> sizes = {4096, 32, 4095, 100000, 0, 4097, 1 << 20, 5,
                                     65536, 12345, 3 * 4096 + 1, 7, 2 << 20, 31};
  for (uint64_t round = 1; round <= 2; ++round) {
    Batch b;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string k = "lv" + std::to_string(i);
      b.Add(k, Payload(k, round, sizes[round == 1 ? i : sizes.size() - 1 - i]));
    }
    std::vector<Status> results = b.Run(engine_.get());
    for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(results[i].ok()) << round << "/" << i;
    ExpectStored(engine_.get(), b, round == 1 ? "first round" : "second round");
    EXPECT_EQ(engine_->Count(), sizes.size());
  }
}

// Writers put batches of random keys (so each locks its keys' stripes in its own
// order) over one key set while readers check every value they see. Afterwards
// each key holds the last value one of the writers gave it.
TEST_P(PutManyTest, ConcurrentCallsOnOverlappingKeysWithReaders) {
  const int kKeys = 48, kWriters = 3, kReaders = 2, kCalls = 150;
  auto key = [](int i) -> std::string { return "pm" + std::to_string(i); };
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(engine_->Put(key(i), MakeValue(key(i), 0, 64)).ok());
  // last[w][i]: version of writer w's last value for key i (0 = none).
  std::vector<std::vector<uint64_t>> last(kWriters, std::vector<uint64_t>(kKeys, 0));
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  ReaderCounts readers;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      while (readers.running.load() < kReaders) std::this_thread::yield();
      std::mt19937_64 rng(w + 11);
      uint64_t version = (w + 1) * 1000000ull;
      for (int c = 0; c < kCalls; ++c) {
        Batch b;
        const size_t n = 1 + rng() % 20;
        for (size_t j = 0; j < n; ++j) {
          int i = static_cast<int>(rng() % kKeys);
          size_t len = 32 + rng() % (rng() % 8 == 0 ? 20000 : 300);
          b.Add(key(i), MakeValue(key(i), ++version, len));
          last[w][i] = version;
        }
        for (const Status& s : b.Run(engine_.get())) {
          if (!s.ok()) errors.fetch_add(1);
        }
      }
    });
  }
  StartCheckingReaders(engine_.get(), kReaders, kKeys, key, &stop, &readers, &threads);
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  stop = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(readers.bad.load(), 0);
  EXPECT_EQ(readers.missing.load(), 0);  // keys are never removed here
  EXPECT_EQ(errors.load() + readers.errors.load(), 0);
  EXPECT_GT(readers.reads.load(), 0u);
  EXPECT_EQ(engine_->Count(), static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    uint64_t version = 0;
    ASSERT_TRUE(CheckValue(key(i), MustGet(key(i)), &version)) << key(i);
    bool someones_last = false;
    for (int w = 0; w < kWriters; ++w) someones_last = someones_last || last[w][i] == version;
    if (version == 0) {  // no writer touched the key
      for (int w = 0; w < kWriters; ++w) someones_last = someones_last || last[w][i] != 0;
      someones_last = !someones_last;
    }
    EXPECT_TRUE(someones_last) << key(i) << " holds version " << version
                               << ", no writer's last value for it";
  }
}

INSTANTIATE_TEST_SUITE_P(BothEngines, PutManyTest, ::testing::Values("memory", "pmem"),
                         [](const auto& info) { return info.param; });

// Pmem only: bucket sharing, space reuse, a full pool and reopening.

// Keys "prefix<i>" in bucket order: result[b] lists keys whose bucket (of
// `bucket_count`) is b, at least `per_bucket` of them for each of the first `buckets`.
std::vector<std::vector<std::string>> KeysByBucket(const std::string& prefix,
                                                   uint64_t bucket_count, uint64_t buckets,
                                                   size_t per_bucket) {
  std::vector<std::vector<std::string>> by(buckets);
  for (uint64_t i = 0;; ++i) {
    bool done = true;
    for (const auto& keys : by) done = done && keys.size() >= per_bucket;
    if (done) return by;
    std::string k = prefix + std::to_string(i);
    uint64_t b = pmem_internal::HashKey(k) & (bucket_count - 1);
    if (b < buckets && by[b].size() < per_bucket) by[b].push_back(k);
  }
}

TEST_F(PmemEngineTest, PutManyStoresKeysThatShareABucket) {
  PmemOptions o = SmallPmemOptions();
  o.bucket_count = 4;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  auto by = KeysByBucket("sb", 4, 3, 12);
  // Bucket 1 already has a chain of six keys; some of them are overwritten mid-chain.
  for (int j = 0; j < 6; ++j) ASSERT_TRUE(e->Put(by[1][j], MakeValue(by[1][j], 1, 50)).ok());
  Batch b;
  for (int j = 0; j < 10; ++j) b.Add(by[0][j], MakeValue(by[0][j], 2, 40 + j));  // one bucket
  for (int j = 0; j < 12; ++j) {  // then three buckets in turn
    b.Add(by[1][j], MakeValue(by[1][j], 2, 300 - j));
    b.Add(by[2][j], MakeValue(by[2][j], 2, j % 3 == 0 ? 5000 : 60));
    if (j < 2) b.Add(by[0][10 + j], MakeValue(by[0][10 + j], 2, 70));
  }
  std::vector<Status> results = b.Run(e.get());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(results[i].ok()) << b.key(i);
  EXPECT_EQ(e->Count(), 36u);
  ExpectStored(e.get(), b, "after PutMany");
  e.reset();
  o.paranoid_checks = true;  // a damaged entry fails the open
  Status s = Open(o, &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e->Count(), 36u);
  ExpectStored(e.get(), b, "after reopen");
}

// With more buckets than lock stripes, two buckets of one group can share a stripe;
// the group must take it once.
TEST_F(PmemEngineTest, PutManyWithTwoBucketsOnOneLockStripe) {
  PmemOptions o = SmallPmemOptions();
  o.bucket_count = 2 * pmem_internal::kLockStripes;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  Batch b;
  for (uint64_t stripe : {uint64_t{3}, uint64_t{7}, uint64_t{500}}) {
    std::string low, high;  // keys in buckets `stripe` and `stripe + kLockStripes`
    for (uint64_t i = 0; low.empty() || high.empty(); ++i) {
      std::string k = "ls" + std::to_string(i);
      uint64_t bucket = pmem_internal::HashKey(k) & (o.bucket_count - 1);
      if (bucket == stripe) low = k;
      if (bucket == stripe + pmem_internal::kLockStripes) high = k;
    }
    b.Add(low, MakeValue(low, 1, 48));
    b.Add(high, MakeValue(high, 1, 4200));
  }
  std::vector<Status> results = b.Run(e.get());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(results[i].ok()) << b.key(i);
  EXPECT_EQ(e->Count(), 6u);
  ExpectStored(e.get(), b, "after PutMany");
}

// Every overwrite frees the entry it replaces: rewriting the same keys over and
// over moves many times the pool's size through it without NoSpace. The values
// differ in size from key to key (a group holds several allocation sizes at once).
TEST_F(PmemEngineTest, PutManyOverwritesReuseTheSpaceTheyReplace) {
  PmemOptions o = SmallPmemOptions(16ull << 20);
  o.bucket_count = 64;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  const int kKeys = 20, kRounds = 300;  // ~260 MB written into a 16 MB pool
  Batch b;
  for (int round = 1; round <= kRounds; ++round) {
    b = Batch();
    for (int i = 0; i < kKeys; ++i) {
      std::string k = "r" + std::to_string(i);
      b.Add(k, MakeValue(k, round, i % 4 == 0 ? 100 : 40000 + 97 * i));
    }
    std::vector<Status> results = b.Run(e.get());
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_TRUE(results[i].ok()) << "round " << round << ", " << b.key(i) << ": "
                                   << results[i].ToString();
    }
    ASSERT_EQ(e->Count(), static_cast<uint64_t>(kKeys)) << "round " << round;
  }
  ExpectStored(e.get(), b, "after the last round");
  e.reset();
  ASSERT_TRUE(Open(o, &e).ok());
  EXPECT_EQ(e->Count(), static_cast<uint64_t>(kKeys));
  ExpectStored(e.get(), b, "after reopen");
}

// A pool filled by PutMany: each item is OK and stored, or NoSpace and absent;
// then overwrites too large for what is left fail alone and keep the old values.
TEST_F(PmemEngineTest, PutManyOnAFullPoolIsNoSpaceForWhatDoesNotFit) {
  PmemOptions o = SmallPmemOptions(16ull << 20);
  o.bucket_count = 256;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Open(o, &e).ok());
  std::vector<std::string> stored;
  bool full = false;
  for (int call = 0; call < 1000 && !full; ++call) {
    Batch b;
    for (int j = 0; j < 10; ++j) {
      std::string k = "full" + std::to_string(call * 10 + j);
      b.Add(k, MakeValue(k, 1, 48 * 1024 + (call * 10 + j) % 1000));
    }
    std::vector<Status> results = b.Run(e.get());
    for (size_t i = 0; i < b.size(); ++i) {
      std::string got;
      if (results[i].ok()) {
        stored.push_back(b.key(i));
        ASSERT_TRUE(e->Get(b.key(i), &got).ok()) << b.key(i);
        EXPECT_TRUE(got == b.value(i)) << b.key(i);
      } else {
        ASSERT_TRUE(results[i].IsNoSpace()) << b.key(i) << ": " << results[i].ToString();
        EXPECT_TRUE(e->Get(b.key(i), &got).IsNotFound()) << b.key(i) << " failed but is there";
        full = true;
      }
    }
  }
  ASSERT_TRUE(full);
  ASSERT_GT(stored.size(), 50u);
  EXPECT_EQ(e->Count(), stored.size());
  // Free room for one more 48 KB value, then: too large, fits, too large.
  ASSERT_TRUE(e->Remove(stored[1]).ok());
  ASSERT_TRUE(e->Remove(stored[2]).ok());
  Batch b;
  b.Add(stored[0], MakeValue(stored[0], 2, 8 << 20));
  b.Add("after", MakeValue("after", 2, 48 * 1024));
  b.Add(stored[3], MakeValue(stored[3], 2, 8 << 20));
  std::vector<Status> results = b.Run(e.get());
  EXPECT_TRUE(results[0].IsNoSpace()) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  EXPECT_TRUE(results[2].IsNoSpace()) << results[2].ToString();
  const uint64_t expected_count = stored.size() - 1;
  EXPECT_EQ(e->Count(), expected_count);
  e.reset();
  ASSERT_TRUE(Open(o, &e).ok());
  EXPECT_EQ(e->Count(), expected_count);
  std::string v;
  ASSERT_TRUE(e->Get("after", &v).ok());
  EXPECT_TRUE(v == b.value(1));
  for (size_t j = 0; j < stored.size(); ++j) {
    if (j == 1 || j == 2) continue;
    uint64_t version = 0;
    ASSERT_TRUE(e->Get(stored[j], &v).ok()) << stored[j];
    ASSERT_TRUE(CheckValue(stored[j], v, &version)) << stored[j];
    EXPECT_EQ(version, 1u) << stored[j];  // the failed overwrites left the old values
  }
}

// What PutMany stored is on media whole: a reopen (recovery verifies every entry's
// checksum; paranoid_checks fails the open on any damaged one) and CheckPmemPool
// find it intact, with every value byte for byte.
TEST_F(PmemEngineTest, PutManyValuesSurviveReopen) {
  PmemOptions o = SmallPmemOptions();
  o.bucket_count = 16;
  std::map<std::string, std::string> expected;
  {
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Open(o, &e).ok());
    std::mt19937_64 rng(5);
    for (int call = 0; call < 40; ++call) {
      Batch b;
      const size_t n = 1 + rng() % 30;
      for (size_t j = 0; j < n; ++j) {
        std::string k = "re" + std::to_string(rng() % 150);
        const uint64_t kind = rng() % 10;
        const size_t len = kind == 0 ? 0 : kind == 1 ? 4096 + rng() % 200000 : 32 + rng() % 900;
        b.Add(k, Payload(k, call * 100 + j, len));
      }
      std::vector<Status> results = b.Run(e.get());
      for (size_t j = 0; j < n; ++j) {
        ASSERT_TRUE(results[j].ok()) << b.key(j) << ": " << results[j].ToString();
        expected[b.key(j)] = b.value(j);
      }
    }
    EXPECT_EQ(e->Count(), expected.size());
  }
  PmemCheckReport report;
  PmemCheckOptions co;
  co.scratch_dir = dir_.path();
  ASSERT_TRUE(CheckPmemPool(dir_.File("pool"), co, &report).ok());
  EXPECT_TRUE(report.clean()) << report.problems.front();
  EXPECT_EQ(report.entries_ok, expected.size());
  o.paranoid_checks = true;
  std::unique_ptr<Engine> e;
  Status s = Open(o, &e);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e->Count(), expected.size());
  for (const auto& [k, v] : expected) {
    std::string got;
    ASSERT_TRUE(e->Get(k, &got).ok()) << k;
    EXPECT_TRUE(got == v) << k;
  }
}

}  // namespace
}  // namespace nvmw
