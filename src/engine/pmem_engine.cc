// PmemEngine: a crash-consistent persistent concurrent hash map in a libpmemobj
// pool file (the role pmemkv's `cmap` played in the thesis). On-media layout and
// the crash-consistency argument are written down in docs/engine.md.
//
// In short: a fixed persistent array of bucket heads (pool offsets) and, per key,
// one entry object holding header + key + value. A Put reserves and fills the new
// entry outside any lock (pmemobj_reserve, volatile until published), then under
// the bucket's lock stripe publishes in ONE redo-logged step (pmemobj_publish):
// the allocation itself, the 8-byte link that makes it reachable, and the free of
// the entry it replaces. A crash before that step leaves nothing on media; after
// it, the new value is durable. Lock stripes live in DRAM and are rebuilt at open.
#include <libpmemobj.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "engine/engine_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using engine_internal::CheckKey;
using engine_internal::CheckValue;
using engine_internal::HashKey;

// The layout name carries the on-media format version: a pool written by an
// incompatible future layout is refused by pmemobj_open itself ("wrong layout").
constexpr const char* kLayout = "nvmw-kv-1";
constexpr uint64_t kMagic = 0x31564B574D564E00ull;  // "\0NVMWKV1" little-endian
constexpr uint32_t kVersion = 1;

// pmemobj type numbers, so recovery can tell our objects apart.
constexpr uint64_t kBucketArrayType = 1;
constexpr uint64_t kEntryType = 2;

// Values from this size up are placed on a 64-byte boundary inside their entry,
// so non-temporal copies into and out of the pool run on whole cache lines.
constexpr uint64_t kAlignValueBytes = 4096;

// Volatile lock stripes; a bucket b is guarded by stripe b % kLockStripes.
constexpr uint64_t kLockStripes = 1024;

// The root object. Written once at creation; `magic` last, so a pool whose
// creation was interrupted is recognised (magic == 0) and finished at next open.
struct Root {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t bucket_count;  // power of two
  PMEMoid buckets;        // uint64_t[bucket_count]: pool offset of the chain head, 0 = empty
};

// One key-value pair. Immutable once published except for `next`, which only
// changes inside a pmemobj_publish redo log.
struct Entry {
  uint64_t next;       // pool offset of the next entry in the chain, 0 = end
  uint64_t hash;       // HashKey(key)
  uint32_t key_len;
  uint32_t value_off;  // offset of the value from the start of the entry
  uint64_t value_len;
  char key[];          // key_len bytes; the value follows at value_off

  std::string_view Key() const { return {key, key_len}; }
  std::string_view Value() const {
    return {reinterpret_cast<const char*>(this) + value_off, value_len};
  }
};
static_assert(sizeof(Entry) == 32);

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::string ParentDir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Checks the pmemobj signature and our layout name straight from the file.
// pmemobj_open itself writes runtime fields into the pool before it notices a
// wrong layout, and a file that is not ours must be left exactly as it was.
Status CheckPoolHeader(const std::string& path) {
  // pmemobj keeps "PMEMOBJ" at offset 0 and the layout name, NUL-terminated,
  // in the PMEMOBJ_MAX_LAYOUT bytes after the 4 KB pool header.
  constexpr size_t kLayoutOffset = 4096;
  char sig[8] = {};
  char layout[PMEMOBJ_MAX_LAYOUT] = {};
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": " + std::strerror(errno));
  bool read_ok = pread(fd, sig, sizeof(sig), 0) == static_cast<ssize_t>(sizeof(sig)) &&
                 pread(fd, layout, sizeof(layout), kLayoutOffset) ==
                     static_cast<ssize_t>(sizeof(layout));
  close(fd);
  if (!read_ok || std::memcmp(sig, "PMEMOBJ", 8) != 0) {
    return Status::Corruption(path + ": not a pmemobj pool (no PMEMOBJ signature)");
  }
  if (strnlen(layout, sizeof(layout)) == sizeof(layout) || std::strcmp(layout, kLayout) != 0) {
    return Status::Corruption(path + ": pool has layout \"" +
                              std::string(layout, strnlen(layout, sizeof(layout))) +
                              "\", expected \"" + kLayout + "\"");
  }
  return Status::OK();
}

std::string PmemError() {
  const char* msg = pmemobj_errormsg();
  return (msg != nullptr && *msg != '\0') ? msg : std::strerror(errno);
}

class PmemEngine final : public Engine {
 public:
  PmemEngine(PMEMobjpool* pop, const PmemOptions& options)
      : pop_(pop), base_(reinterpret_cast<char*>(pop)), options_(options),
        stripes_(kLockStripes) {}

  ~PmemEngine() override { pmemobj_close(pop_); }

  // Validates the root, finishes an interrupted creation, then walks every chain
  // (checking each link so a damaged pool is refused rather than crashing later),
  // rebuilds the volatile counts, and frees entry objects no chain reaches.
  Status Init(const std::string& path, uint64_t bucket_count);

  Status Get(std::string_view key, const ValueFn& fn) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    uint64_t b = h & bucket_mask_;
    std::shared_lock lock(stripes_[b % kLockStripes].mu);
    const Entry* e = Find(b, h, key, nullptr);
    if (e == nullptr) return Status::NotFound();
    fn(e->Value());  // straight from the pool; the shared lock pins the entry
    return Status::OK();
  }

  Status Exists(std::string_view key) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    uint64_t b = h & bucket_mask_;
    std::shared_lock lock(stripes_[b % kLockStripes].mu);
    return Find(b, h, key, nullptr) != nullptr ? Status::OK() : Status::NotFound();
  }

  Status Put(std::string_view key, std::string_view value) override;
  Status Remove(std::string_view key) override;

  uint64_t Count() override {
    int64_t total = 0;
    for (const Stripe& s : stripes_) total += s.count.load(std::memory_order_relaxed);
    return total < 0 ? 0 : static_cast<uint64_t>(total);
  }

  const char* Name() const override { return "pmem"; }

 private:
  // A stripe's lock plus the number of keys in its buckets (changed only under
  // the exclusive lock; atomic so Count() can read it without locking).
  struct alignas(64) Stripe {
    std::shared_mutex mu;
    std::atomic<int64_t> count{0};
  };

  Entry* At(uint64_t off) const { return reinterpret_cast<Entry*>(base_ + off); }

  // Looks `key` up in bucket b (stripe lock held). When link is not null it
  // receives the address of the 8-byte field that points at the result (or at
  // the chain's end when the key is absent): the field a writer rewrites.
  Entry* Find(uint64_t b, uint64_t h, std::string_view key, uint64_t** link) const {
    uint64_t* slot = &buckets_[b];
    while (*slot != 0) {
      Entry* e = At(*slot);
      if (e->hash == h && e->Key() == key) {
        if (link != nullptr) *link = slot;
        return e;
      }
      slot = &e->next;
    }
    if (link != nullptr) *link = slot;
    return nullptr;
  }

  PMEMobjpool* const pop_;
  char* const base_;
  const PmemOptions options_;
  Root* root_ = nullptr;
  uint64_t uuid_lo_ = 0;  // pool id half of every PMEMoid in this pool
  uint64_t* buckets_ = nullptr;
  uint64_t bucket_mask_ = 0;
  std::vector<Stripe> stripes_;
};

Status PmemEngine::Init(const std::string& path, uint64_t bucket_count) {
  size_t root_size = pmemobj_root_size(pop_);
  if (root_size != 0 && root_size != sizeof(Root)) {
    return Status::Corruption(path + ": root object of " + std::to_string(root_size) +
                              " bytes, expected " + std::to_string(sizeof(Root)));
  }
  PMEMoid root_oid = pmemobj_root(pop_, sizeof(Root));
  if (OID_IS_NULL(root_oid)) {
    return Status::NoSpace(path + ": cannot allocate the root object: " + PmemError());
  }
  root_ = static_cast<Root*>(pmemobj_direct(root_oid));
  uuid_lo_ = root_oid.pool_uuid_lo;

  if (root_->magic == 0) {
    // New pool, or a creation interrupted before it finished: no key was ever
    // stored, so (re)building the bucket array loses nothing.
    if (!OID_IS_NULL(root_->buckets)) pmemobj_free(&root_->buckets);
    uint64_t n = RoundUpPow2(std::max<uint64_t>(bucket_count, 1));
    root_->bucket_count = n;
    root_->version = kVersion;
    root_->reserved = 0;
    pmemobj_persist(pop_, root_, sizeof(Root));
    // pmemobj_zalloc sets root_->buckets atomically with the allocation.
    if (pmemobj_zalloc(pop_, &root_->buckets, n * sizeof(uint64_t), kBucketArrayType) != 0) {
      return Status::NoSpace(path + ": pool too small for " + std::to_string(n) +
                             " buckets: " + PmemError());
    }
    root_->magic = kMagic;
    pmemobj_persist(pop_, &root_->magic, sizeof(root_->magic));
  } else if (root_->magic != kMagic) {
    return Status::Corruption(path + ": bad magic in root object; not an nvmw pool");
  }
  if (root_->version != kVersion) {
    return Status::Corruption(path + ": unsupported format version " +
                              std::to_string(root_->version));
  }
  uint64_t n = root_->bucket_count;
  if (n == 0 || (n & (n - 1)) != 0 || OID_IS_NULL(root_->buckets) ||
      pmemobj_alloc_usable_size(root_->buckets) < n * sizeof(uint64_t)) {
    return Status::Corruption(path + ": bucket array damaged");
  }
  buckets_ = static_cast<uint64_t*>(pmemobj_direct(root_->buckets));
  bucket_mask_ = n - 1;

  // Walk every chain. Each link must land inside the pool on an entry object
  // whose header agrees with its size and its bucket; anything else means the
  // file was damaged outside our control.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::IOError(path + ": " + std::strerror(errno));
  const uint64_t pool_bytes = static_cast<uint64_t>(st.st_size);
  std::unordered_set<uint64_t> reachable;
  for (uint64_t b = 0; b < n; ++b) {
    uint64_t off = buckets_[b];
    while (off != 0) {
      if (off % 8 != 0 || off < 4096 || off + sizeof(Entry) > pool_bytes) {
        return Status::Corruption(path + ": bad link in bucket " + std::to_string(b));
      }
      PMEMoid oid{uuid_lo_, off};
      const Entry* e = At(off);
      size_t usable = pmemobj_alloc_usable_size(oid);
      if (pmemobj_type_num(oid) != kEntryType || usable > pool_bytes - off ||
          e->value_off < sizeof(Entry) + e->key_len || e->key_len == 0 ||
          e->value_len > usable || e->value_off + e->value_len > usable ||
          (e->hash & bucket_mask_) != b || HashKey(e->Key()) != e->hash) {
        return Status::Corruption(path + ": damaged entry in bucket " + std::to_string(b));
      }
      if (!reachable.insert(off).second) {
        return Status::Corruption(path + ": cycle in bucket " + std::to_string(b));
      }
      stripes_[b % kLockStripes].count.fetch_add(1, std::memory_order_relaxed);
      off = e->next;
    }
  }

  // Puts publish atomically, so unreachable entries should never exist; this
  // sweep guarantees that a crash can never leak space even so.
  std::vector<PMEMoid> orphans;
  for (PMEMoid oid = pmemobj_first(pop_); !OID_IS_NULL(oid); oid = pmemobj_next(oid)) {
    if (pmemobj_type_num(oid) == kEntryType && reachable.count(oid.off) == 0) {
      orphans.push_back(oid);
    }
  }
  for (PMEMoid& oid : orphans) pmemobj_free(&oid);
  return Status::OK();
}

Status PmemEngine::Put(std::string_view key, std::string_view value) {
  Status s = CheckKey(key, options_.max_key_bytes);
  if (!s.ok()) return s;
  s = CheckValue(value, options_.max_value_bytes);
  if (!s.ok()) return s;
  const uint64_t h = HashKey(key);
  const uint64_t b = h & bucket_mask_;
  const bool large = value.size() >= kAlignValueBytes;
  const uint64_t head = sizeof(Entry) + key.size();
  const uint64_t size = head + value.size() + (large ? 63 : 0);

  if (size > PMEMOBJ_MAX_ALLOC_SIZE) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) +
                                   " bytes exceeds libpmemobj's object limit");
  }

  // 1. Reserve and fill the new entry without any lock. The reservation is
  // volatile: if the process dies before step 2 the pool is unchanged.
  pobj_action acts[4];
  PMEMoid oid = pmemobj_reserve(pop_, &acts[0], size, kEntryType);
  if (OID_IS_NULL(oid)) {
    if (errno == ENOMEM) {
      return Status::NoSpace("pool full: cannot store a value of " +
                             std::to_string(value.size()) + " bytes");
    }
    return Status::IOError("pmemobj_reserve: " + PmemError());
  }
  Entry* e = At(oid.off);
  uint64_t value_off = head;
  if (large) {
    uintptr_t addr = reinterpret_cast<uintptr_t>(e) + head;
    value_off += ((addr + 63) & ~uintptr_t{63}) - addr;
  }
  e->next = 0;
  e->hash = h;
  e->key_len = static_cast<uint32_t>(key.size());
  e->value_off = static_cast<uint32_t>(value_off);
  e->value_len = value.size();
  std::memcpy(e->key, key.data(), key.size());
  char* dst = reinterpret_cast<char*>(e) + value_off;
  if (large) {
    // Non-temporal copy of the bulk, then one flush of the header (+key)
    // whose drain also orders the copy.
    pmemobj_memcpy(pop_, dst, value.data(), value.size(),
                   PMEMOBJ_F_MEM_NODRAIN | PMEMOBJ_F_MEM_NONTEMPORAL);
    pmemobj_persist(pop_, e, head);
  } else {
    if (!value.empty()) std::memcpy(dst, value.data(), value.size());
    pmemobj_persist(pop_, e, value_off + value.size());
  }

  // 2. Under the stripe lock: link the entry where the key lives (or at the
  // chain's end) and free the one it replaces, all in one redo-logged publish.
  size_t nacts = 1;
  Stripe& stripe = stripes_[b % kLockStripes];
  {
    std::unique_lock lock(stripe.mu);
    uint64_t* link = nullptr;
    Entry* old = Find(b, h, key, &link);
    if (old != nullptr) {
      if (old->next != 0) pmemobj_set_value(pop_, &acts[nacts++], &e->next, old->next);
      PMEMoid old_oid{uuid_lo_, static_cast<uint64_t>(reinterpret_cast<char*>(old) - base_)};
      pmemobj_defer_free(pop_, old_oid, &acts[nacts++]);
    }
    pmemobj_set_value(pop_, &acts[nacts++], link, oid.off);
    if (pmemobj_publish(pop_, acts, nacts) != 0) {
      int err = errno;
      pmemobj_cancel(pop_, acts, nacts);
      return err == ENOMEM ? Status::NoSpace("pool full: cannot log the update")
                           : Status::IOError("pmemobj_publish: " + PmemError());
    }
    if (old == nullptr) {
      stripe.count.store(stripe.count.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
    }
  }
  return Status::OK();
}

Status PmemEngine::Remove(std::string_view key) {
  Status s = CheckKey(key, options_.max_key_bytes);
  if (!s.ok()) return s;
  const uint64_t h = HashKey(key);
  const uint64_t b = h & bucket_mask_;
  Stripe& stripe = stripes_[b % kLockStripes];
  std::unique_lock lock(stripe.mu);
  uint64_t* link = nullptr;
  Entry* old = Find(b, h, key, &link);
  if (old == nullptr) return Status::NotFound();
  // Unlink and free in one redo-logged publish: after a crash the key is
  // either fully present or fully gone, and its space never leaks.
  pobj_action acts[2];
  pmemobj_set_value(pop_, &acts[0], link, old->next);
  PMEMoid old_oid{uuid_lo_, static_cast<uint64_t>(reinterpret_cast<char*>(old) - base_)};
  pmemobj_defer_free(pop_, old_oid, &acts[1]);
  if (pmemobj_publish(pop_, acts, 2) != 0) {
    int err = errno;
    pmemobj_cancel(pop_, acts, 2);
    return err == ENOMEM ? Status::NoSpace("pool full: cannot log the removal")
                         : Status::IOError("pmemobj_publish: " + PmemError());
  }
  stripe.count.store(stripe.count.load(std::memory_order_relaxed) - 1,
                     std::memory_order_relaxed);
  return Status::OK();
}

}  // namespace

Status OpenPmemEngine(const std::string& path, const PmemOptions& options,
                      std::unique_ptr<Engine>* engine) {
  if (engine == nullptr) return Status::InvalidArgument("engine output pointer is null");
  if (path.empty()) return Status::InvalidArgument("empty pool path");
  if (options.bucket_count == 0 || options.bucket_count > (1ull << 32)) {
    return Status::InvalidArgument("bucket_count must be in [1, 2^32]");
  }
  const std::string dir = ParentDir(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return Status::IOError("pool directory " + dir + " of " + path + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::IOError("pool directory " + dir + " of " + path + ": not a directory");
  }

  PMEMobjpool* pop = nullptr;
  for (int attempt = 0; pop == nullptr && attempt < 2; ++attempt) {
    errno = 0;
    if (stat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) return Status::IOError(path + ": " + std::strerror(errno));
      if (!options.create_if_missing) return Status::NotFound(path + ": pool file does not exist");
      if (options.pool_size_bytes < PMEMOBJ_MIN_POOL) {
        return Status::InvalidArgument("pool_size_bytes must be at least " +
                                       std::to_string(PMEMOBJ_MIN_POOL));
      }
      pop = pmemobj_create(path.c_str(), kLayout, options.pool_size_bytes, 0666);
      if (pop != nullptr) break;
      if (errno == EEXIST) continue;  // lost a race with another creator: open it
      int err = errno;
      std::string msg = path + ": cannot create pool: " + PmemError();
      unlink(path.c_str());  // pmemobj_create may leave a partial file behind
      return err == ENOSPC ? Status::NoSpace(msg) : Status::IOError(msg);
    }
    if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
      return Status::IOError(path + ": not a regular file");
    }
    if (access(path.c_str(), R_OK | W_OK) != 0) {
      return Status::IOError(path + ": " + std::strerror(errno));
    }
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < PMEMOBJ_MIN_POOL) {
      return Status::Corruption(path + ": not an nvmw pool (" + std::to_string(st.st_size) +
                                " bytes, smaller than any pmemobj pool)");
    }
    if (S_ISREG(st.st_mode)) {
      Status hs = CheckPoolHeader(path);
      if (!hs.ok()) return hs;
    }
    pop = pmemobj_open(path.c_str(), kLayout);
    if (pop == nullptr) {
      int err = errno;
      std::string msg = path + ": " + PmemError();
      if (err == EWOULDBLOCK || err == EAGAIN) {
        return Status::IOError(path + ": pool is open in another process or engine");
      }
      if (err == EACCES || err == EPERM || err == EROFS || err == ENOMEM) {
        return Status::IOError(msg);
      }
      if (err == ENOENT) continue;  // removed between stat and open
      return Status::Corruption("not a valid nvmw pool: " + msg);
    }
  }
  if (pop == nullptr) return Status::IOError(path + ": cannot open or create pool");

  auto pmem = std::make_unique<PmemEngine>(pop, options);
  Status s = pmem->Init(path, options.bucket_count);
  if (!s.ok()) return s;  // the destructor closes the pool
  if (options.prefault && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    // A single-file pool is mapped whole, header first, at `pop`.
    madvise(pop, static_cast<size_t>(st.st_size), MADV_POPULATE_WRITE);
  }
  *engine = std::move(pmem);
  return Status::OK();
}

}  // namespace nvmw
