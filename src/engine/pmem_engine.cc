// PmemEngine: a crash-consistent persistent concurrent hash map in a libpmemobj
// pool file (the role pmemkv's `cmap` played in the thesis). On-media layout, the
// crash-consistency argument and the handling of damaged pools are written down
// in docs/engine.md.
//
// In short: a fixed persistent array of bucket heads (pool offsets) and, per key,
// one entry object holding header + checksum + key + value. A Put reserves and
// fills the new entry outside any lock (pmemobj_reserve, volatile until
// published), then under the bucket's lock stripe publishes in ONE redo-logged
// step (pmemobj_publish): the allocation itself, the 8-byte link that makes it
// reachable, and the free of the entry it replaces. A crash before that step
// leaves nothing on media; after it, the new value is durable. Lock stripes live
// in DRAM and are rebuilt at open.
//
// Damage: nothing read from the file is trusted. Before libpmemobj maps a pool,
// its header, descriptor, size and our root object are checked from the file
// (read-only); after it is mapped, every link must name an allocated entry object
// (the set comes from libpmemobj's own heap walk) and every entry's checksum must
// match, so a damaged pool is refused or its damaged entries quarantined, never
// dereferenced blindly.
#include <dirent.h>
#include <fcntl.h>
#include <libpmemobj.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using engine_internal::CheckKey;
using engine_internal::CheckValue;
using engine_internal::HashKey;

// The layout name carries the on-media format version. Version 1 (no entry
// checksums) is refused with a message that names it; see docs/engine.md.
constexpr const char* kLayout = "nvmw-kv-2";
constexpr const char* kLayoutPrefix = "nvmw-kv-";
constexpr uint64_t kMagic = 0x32564B574D564E00ull;  // "\0NVMWKV2" little-endian
constexpr uint32_t kVersion = 2;

// pmemobj type numbers, so recovery can tell our objects apart.
constexpr uint64_t kBucketArrayType = 1;
constexpr uint64_t kEntryType = 2;

// Values from this size up are placed on a 64-byte boundary inside their entry,
// so non-temporal copies into and out of the pool run on whole cache lines.
constexpr uint64_t kAlignValueBytes = 4096;

// Volatile lock stripes; a bucket b is guarded by stripe b % kLockStripes.
constexpr uint64_t kLockStripes = 1024;

// libpmemobj's single-file pool: a 4 KB pool header ("PMEMOBJ", checksum at
// 4088), then the 2 KB persistent descriptor (layout name, offsets, checksum at
// its end), then root_offset/run_id/root_size/conversion_flags/heap_size. The
// first 8 KB also hold runtime fields libpmemobj writes at every open.
constexpr size_t kHeaderBytes = 8192;
constexpr size_t kPoolHdrChecksumOff = 4088;
constexpr size_t kPoolHdrIncompatOff = 16;
constexpr uint32_t kPoolFeatCksum2K = 0x0002;  // POOL_FEAT_CKSUM_2K
constexpr size_t kDescOff = 4096;
constexpr size_t kDescBytes = 2048;
constexpr size_t kDescHeapOffsetOff = kDescOff + PMEMOBJ_MAX_LAYOUT + 16;
constexpr size_t kDescRootOffsetOff = kDescOff + kDescBytes;
constexpr size_t kDescRootSizeOff = kDescRootOffsetOff + 16;
constexpr size_t kDescHeapSizeOff = kDescRootOffsetOff + 32;

// The root object, written once inside a pool that is not yet visible at its
// final path (creation is atomic), with a checksum over its fields.
struct Root {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t bucket_count;  // power of two
  PMEMoid buckets;        // uint64_t[bucket_count]: pool offset of the chain head, 0 = empty
  uint64_t check;         // XXH3-64 of the fields above
};
static_assert(sizeof(Root) == 48);

uint64_t RootCheck(const Root& r) { return XXH3_64bits(&r, offsetof(Root, check)); }

// One key-value pair. Immutable once published except for `next`, which only
// changes inside a pmemobj_publish redo log and is therefore not checksummed:
// links are validated against the heap's set of allocated entries instead.
struct Entry {
  uint64_t next;       // pool offset of the next entry in the chain, 0 = end
  uint64_t check;      // XXH3-64 of bytes [kCheckedFrom, value_off + value_len)
  uint64_t hash;       // HashKey(key)
  uint32_t key_len;
  uint32_t value_off;  // offset of the value from the start of the entry
  uint64_t value_len;
  char key[];          // key_len bytes; zero padding; the value at value_off

  std::string_view Key() const { return {key, key_len}; }
  std::string_view Value() const {
    return {reinterpret_cast<const char*>(this) + value_off, value_len};
  }
};
static_assert(sizeof(Entry) == 40);
constexpr size_t kCheckedFrom = offsetof(Entry, hash);

}  // namespace
namespace engine_internal {
uint64_t Xxh3Avx2(const void* data, size_t n);  // entry_checksum_avx2.cc
uint64_t Xxh3Avx2Two(const void* a, size_t na, const void* b, size_t nb);
}  // namespace engine_internal
namespace {

// Large inputs go to the AVX2 build of XXH3 where the CPU has it (about twice the
// SSE2 speed); short ones stay inline.
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
constexpr size_t kAvx2From = 2048;

uint64_t Hash(const void* data, size_t n) {
  if (n >= kAvx2From && kHaveAvx2) return engine_internal::Xxh3Avx2(data, n);
  return XXH3_64bits(data, n);
}

// The hash of a followed by b, as if contiguous.
uint64_t Hash2(const void* a, size_t na, const void* b, size_t nb) {
  if (kHaveAvx2) return engine_internal::Xxh3Avx2Two(a, na, b, nb);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, a, na);
  XXH3_64bits_update(&state, b, nb);
  return XXH3_64bits_digest(&state);
}

uint64_t EntryCheck(const Entry* e) {
  return Hash(reinterpret_cast<const char*>(e) + kCheckedFrom,
              e->value_off + e->value_len - kCheckedFrom);
}

// Header lengths that stay inside an object of `usable` bytes.
bool EntryBoundsOk(const Entry* e, uint64_t usable) {
  return usable >= sizeof(Entry) && e->key_len > 0 && e->key_len <= usable - sizeof(Entry) &&
         e->value_off >= sizeof(Entry) + e->key_len && e->value_off <= usable &&
         e->value_len <= usable - e->value_off;
}

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

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Bytes from a damaged or foreign file go into messages escaped, so a message is
// always printable ASCII (and valid UTF-8 for the Python binding).
std::string Printable(std::string_view s, size_t max = 64) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// libpmemobj's header checksum (Fletcher-64 over 32-bit words): the checksum
// field itself and every word from skip_off on count as zero.
bool PmemChecksumOk(const char* base, size_t len, size_t csum_off, size_t skip_off) {
  uint32_t lo = 0, hi = 0;
  for (size_t off = 0; off + 4 <= len; off += 4) {
    if (off != csum_off && off != csum_off + 4 && off < skip_off) {
      uint32_t w;
      std::memcpy(&w, base + off, 4);
      lo += w;
    }
    hi += lo;
  }
  return Load64(base + csum_off) == ((static_cast<uint64_t>(hi) << 32) | lo);
}

std::string PmemError() {
  const char* msg = pmemobj_errormsg();
  return (msg != nullptr && *msg != '\0') ? msg : std::strerror(errno);
}

// libpmemobj 1.x lane: three logs (internal redo, external redo, undo) in 3 KB,
// each with a 64-byte header {checksum, next, capacity, gen_num, flags, unused[3]}.
// Redo logs are replayed only when their checksum matches; the undo log is not.
constexpr uint64_t kLaneBytes = 3072;
struct LaneLog {
  uint64_t offset;
  uint64_t capacity;
};
constexpr LaneLog kLaneLogs[3] = {{0, 192}, {256, 640}, {960, 2048}};

Status CheckLanes(const std::string& path, uint64_t lanes_offset, uint64_t nlanes,
                  uint64_t heap_offset) {
  if (lanes_offset < kHeaderBytes || nlanes == 0 || nlanes > 65536 ||
      lanes_offset + nlanes * kLaneBytes > heap_offset) {
    return Status::Corruption(path + ": pool descriptor names impossible lanes");
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": " + std::strerror(errno));
  std::string lanes(nlanes * kLaneBytes, '\0');
  bool ok = pread(fd, lanes.data(), lanes.size(), static_cast<off_t>(lanes_offset)) ==
            static_cast<ssize_t>(lanes.size());
  close(fd);
  if (!ok) return Status::IOError(path + ": cannot read the lanes");
  for (uint64_t l = 0; l < nlanes; ++l) {
    for (const LaneLog& log : kLaneLogs) {
      const char* hdr = lanes.data() + l * kLaneBytes + log.offset;
      if (Load64(hdr + 8) != 0 || Load64(hdr + 16) > log.capacity || Load64(hdr + 40) != 0 ||
          Load64(hdr + 48) != 0 || Load64(hdr + 56) != 0) {
        return Status::Corruption(path + ": log header of lane " + std::to_string(l) +
                                  " damaged");
      }
    }
    // The undo log serves transactions only, which nvmw never runs: it stays all
    // zero but its capacity. libpmemobj replays undo entries without a checksum,
    // so a flipped byte there made pmemobj_open write through a wild pointer.
    const char* undo = lanes.data() + l * kLaneBytes + kLaneLogs[2].offset;
    for (size_t i = 0; i < kLaneBytes - kLaneLogs[2].offset; i += 8) {
      if (i != 16 && Load64(undo + i) != 0) {
        return Status::Corruption(path + ": undo log of lane " + std::to_string(l) +
                                  " damaged");
      }
    }
  }
  return Status::OK();
}

// Facts read from a pool file before libpmemobj maps it.
struct ImageInfo {
  uint64_t file_bytes = 0;
  uint64_t heap_offset = 0;
  uint64_t root_offset = 0;
  uint32_t format_version = 0;
  std::string header;  // the first kHeaderBytes as they were
};

// Reads and checks, without writing, everything libpmemobj would otherwise find
// wrong only after it has written runtime fields into the file: signature, pool
// header and descriptor checksums, layout name, that the heap ends where the file
// ends (a truncated pool does not), and our root object. Regular files only.
Status CheckImage(const std::string& path, ImageInfo* info) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Status::IOError(path + ": " + std::strerror(err));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  info->file_bytes = size;
  if (size == 0) {
    close(fd);
    return Status::Corruption(path + ": empty file (0 bytes), not an nvmw pool; an older nvmw "
                              "killed while creating a pool leaves such a file: remove it");
  }
  if (size < PMEMOBJ_MIN_POOL) {
    close(fd);
    return Status::Corruption(path + ": not an nvmw pool (" + std::to_string(size) +
                              " bytes, smaller than any pmemobj pool)");
  }
  std::string& h = info->header;
  h.assign(kHeaderBytes, '\0');
  Root root{};
  bool read_ok = pread(fd, h.data(), kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes);
  const uint64_t lanes_offset = Load64(h.data() + kDescOff + PMEMOBJ_MAX_LAYOUT);
  const uint64_t nlanes = Load64(h.data() + kDescOff + PMEMOBJ_MAX_LAYOUT + 8);
  const uint64_t heap_offset = Load64(h.data() + kDescHeapOffsetOff);
  const uint64_t heap_size = Load64(h.data() + kDescHeapSizeOff);
  const uint64_t root_offset = Load64(h.data() + kDescRootOffsetOff);
  const uint64_t root_size = Load64(h.data() + kDescRootSizeOff);
  bool root_read = false;
  if (read_ok && root_offset >= kHeaderBytes && root_offset <= size - sizeof(Root)) {
    root_read = pread(fd, &root, sizeof(root), static_cast<off_t>(root_offset)) ==
                static_cast<ssize_t>(sizeof(root));
  }
  close(fd);
  if (!read_ok || std::memcmp(h.data(), "PMEMOBJ", 8) != 0) {
    return Status::Corruption(path + ": not a pmemobj pool (no PMEMOBJ signature)");
  }
  uint32_t incompat;
  std::memcpy(&incompat, h.data() + kPoolHdrIncompatOff, 4);
  size_t hdr_end = (incompat & kPoolFeatCksum2K) ? 2048 : kPoolHdrChecksumOff;
  if (!PmemChecksumOk(h.data(), 4096, kPoolHdrChecksumOff, hdr_end)) {
    return Status::Corruption(path + ": pool header damaged (checksum mismatch)");
  }
  const char* layout = h.data() + kDescOff;
  size_t layout_len = strnlen(layout, PMEMOBJ_MAX_LAYOUT);
  std::string_view name(layout, layout_len);
  if (layout_len < PMEMOBJ_MAX_LAYOUT && name.substr(0, 8) == kLayoutPrefix) {
    info->format_version = static_cast<uint32_t>(std::atoi(std::string(name.substr(8)).c_str()));
  }
  if (layout_len == PMEMOBJ_MAX_LAYOUT || name != kLayout) {
    if (info->format_version == 1) {
      return Status::Corruption(
          path + ": nvmw pool format version 1 (layout \"nvmw-kv-1\", entries without "
          "checksums); this nvmw reads format version 2 only: recreate the pool");
    }
    return Status::Corruption(path + ": pool has layout \"" + Printable(name) + "\", expected \"" +
                              kLayout + "\"");
  }
  if (!PmemChecksumOk(h.data() + kDescOff, kDescBytes, kDescBytes - 8, kDescBytes)) {
    return Status::Corruption(path + ": pool descriptor damaged (checksum mismatch)");
  }
  if (heap_offset < kHeaderBytes || heap_offset >= size || heap_size != size - heap_offset) {
    return Status::Corruption(path + ": file is " + std::to_string(size) +
                              " bytes but its heap ends at byte " +
                              std::to_string(heap_offset + heap_size) +
                              " (truncated or extended pool)");
  }
  info->heap_offset = heap_offset;
  info->root_offset = root_offset;
  // libpmemobj replays its lanes' logs at open and trusts their headers: a damaged
  // `next` (extension log) or capacity makes it fault inside pmemobj_open. nvmw
  // never needs an extension log (a publish has at most 4 actions), so next must
  // be 0, the capacity at most the lane's fixed size, the unused words zero.
  Status s = CheckLanes(path, lanes_offset, nlanes, heap_offset);
  if (!s.ok()) return s;
  if (root_offset == 0 || root_size != sizeof(Root) || !root_read || root_offset < heap_offset) {
    return Status::Corruption(path + ": root object missing or damaged (offset " +
                              std::to_string(root_offset) + ", " + std::to_string(root_size) +
                              " bytes)");
  }
  if (root.magic != kMagic || root.check != RootCheck(root) || root.version != kVersion) {
    return Status::Corruption(path + ": root object damaged (magic, version or checksum wrong)");
  }
  const uint64_t n = root.bucket_count;
  if (n == 0 || n > (1ull << 32) || (n & (n - 1)) != 0 || root.buckets.off < heap_offset ||
      root.buckets.off > size || n * 8 > size - root.buckets.off ||
      root.buckets.pool_uuid_lo == 0) {
    return Status::Corruption(path + ": root object names an impossible bucket array");
  }
  return Status::OK();
}

// Puts back the first kHeaderBytes of `path` if they differ from `saved`: after a
// failed open, libpmemobj's runtime fields (run id, shutdown state, its volatile
// descriptor part) must not remain in a file we refused.
void RestoreHeader(const std::string& path, const std::string& saved) {
  if (saved.size() != kHeaderBytes) return;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  std::string now(kHeaderBytes, '\0');
  if (pread(fd, now.data(), kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes) &&
      now != saved) {
    if (pwrite(fd, saved.data(), kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes)) {
      fsync(fd);
    }
  }
  close(fd);
}

// What recovery found; `report` is set only by CheckPmemPool.
struct Recovery {
  PmemCheckReport* report = nullptr;   // check mode: record and go on instead of failing
  std::vector<uint64_t> intact;        // check mode: offsets of intact reachable entries
  std::vector<std::pair<uint64_t, uint64_t>> unreachable;  // check mode: (offset, usable) of entries no chain reaches
  std::string first_structural;        // first link problem (fails a normal open)
  uint64_t damaged = 0;

  void Problem(std::string line) {
    if (report != nullptr) report->problems.push_back(std::move(line));
  }
};

class PmemEngine final : public Engine {
 public:
  PmemEngine(PMEMobjpool* pop, const PmemOptions& options)
      : pop_(pop), base_(reinterpret_cast<char*>(pop)), options_(options),
        stripes_(kLockStripes) {}

  ~PmemEngine() override { pmemobj_close(pop_); }

  // Validates the root and the bucket array, then walks every chain: each link
  // must name an allocated entry object (libpmemobj's heap walk gives the set),
  // each entry's lengths must fit its object and its checksum must match.
  // Damaged entries are quarantined; a bad link or a cycle fails the open
  // (Corruption) unless rec->report is set (check mode). Rebuilds the volatile
  // counts and, on an undamaged pool, frees entry objects no chain reaches.
  Status Recover(const std::string& path, const ImageInfo& info, Recovery* rec);

  Status Get(std::string_view key, const ValueFn& fn) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    uint64_t b = h & bucket_mask_;
    std::shared_lock lock(stripes_[b % kLockStripes].mu);
    const Entry* e = Find(b, h, key, nullptr);
    if (e == nullptr) return Status::NotFound();
    s = Servable(e, key);
    if (!s.ok()) return s;
    fn(e->Value());  // straight from the pool; the shared lock pins the entry
    return Status::OK();
  }

  Status Exists(std::string_view key) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    uint64_t b = h & bucket_mask_;
    std::shared_lock lock(stripes_[b % kLockStripes].mu);
    const Entry* e = Find(b, h, key, nullptr);
    if (e == nullptr) return Status::NotFound();
    return Servable(e, key);
  }

  Status Put(std::string_view key, std::string_view value) override;
  Status Remove(std::string_view key) override;

  uint64_t Count() override {
    int64_t total = 0;
    for (const Stripe& s : stripes_) total += s.count.load(std::memory_order_relaxed);
    return total < 0 ? 0 : static_cast<uint64_t>(total);
  }

  const char* Name() const override { return "pmem"; }

  const Entry* EntryAt(uint64_t off) const { return At(off); }

 private:
  // A stripe's lock plus the number of keys in its buckets (changed only under
  // the exclusive lock; atomic so Count() can read it without locking).
  struct alignas(64) Stripe {
    std::shared_mutex mu;
    std::atomic<int64_t> count{0};
  };

  Entry* At(uint64_t off) const { return reinterpret_cast<Entry*>(base_ + off); }
  uint64_t Off(const Entry* e) const {
    return static_cast<uint64_t>(reinterpret_cast<const char*>(e) - base_);
  }

  // Quarantine of entries found damaged at open: offset -> whether its key can
  // be read (its lengths fit its object). Consulted only while it is not empty.
  bool Quarantined(uint64_t off, bool* key_readable) const {
    if (!has_quarantine_.load(std::memory_order_acquire)) return false;
    std::lock_guard g(quarantine_mu_);
    auto it = quarantine_.find(off);
    if (it == quarantine_.end()) return false;
    if (key_readable != nullptr) *key_readable = it->second;
    return true;
  }
  void Unquarantine(uint64_t off) {
    if (!has_quarantine_.load(std::memory_order_acquire)) return;
    std::lock_guard g(quarantine_mu_);
    quarantine_.erase(off);
  }

  Status Servable(const Entry* e, std::string_view key) const {
    if (Quarantined(Off(e), nullptr)) {
      return Status::Corruption("key \"" + Printable(key) +
                                "\": entry damaged (checksum mismatch at open); not served");
    }
    if (options_.verify_checksums && e->check != EntryCheck(e)) {
      return Status::Corruption("key \"" + Printable(key) + "\": entry checksum mismatch; not served");
    }
    return Status::OK();
  }

  // Looks `key` up in bucket b (stripe lock held). When link is not null it
  // receives the address of the 8-byte field that points at the result (or at
  // the chain's end when the key is absent): the field a writer rewrites.
  // Quarantined entries whose lengths are unusable are stepped over unread.
  Entry* Find(uint64_t b, uint64_t h, std::string_view key, uint64_t** link) const {
    uint64_t* slot = &buckets_[b];
    while (*slot != 0) {
      Entry* e = At(*slot);
      bool readable = true;
      if ((!Quarantined(*slot, &readable) || readable) && e->hash == h && e->Key() == key) {
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
  std::atomic<bool> has_quarantine_{false};
  mutable std::mutex quarantine_mu_;
  std::unordered_map<uint64_t, bool> quarantine_;
};

Status PmemEngine::Recover(const std::string& path, const ImageInfo& info, Recovery* rec) {
  const uint64_t pool_bytes = info.file_bytes;
  PMEMoid root_oid = pmemobj_root(pop_, 0);
  if (OID_IS_NULL(root_oid) || pmemobj_root_size(pop_) != sizeof(Root) ||
      root_oid.off != info.root_offset) {
    return Status::Corruption(path + ": root object missing or of the wrong size");
  }
  root_ = static_cast<Root*>(pmemobj_direct(root_oid));
  uuid_lo_ = root_oid.pool_uuid_lo;
  if (root_->magic != kMagic || root_->check != RootCheck(*root_)) {
    return Status::Corruption(path + ": root object damaged");
  }
  const uint64_t n = root_->bucket_count;

  // Every allocated object, from libpmemobj's heap walk (bounded: a damaged run
  // bitmap must not make it loop forever). Entries by offset with usable size.
  std::unordered_map<uint64_t, uint64_t> entries;
  bool bucket_array_ok = false;
  const uint64_t max_objects = pool_bytes / 16 + 1;
  uint64_t walked = 0;
  for (PMEMoid oid = pmemobj_first(pop_); !OID_IS_NULL(oid); oid = pmemobj_next(oid)) {
    if (++walked > max_objects) {
      return Status::Corruption(path + ": heap walk does not end (damaged heap)");
    }
    if (oid.off < info.heap_offset || oid.off >= pool_bytes) continue;
    uint64_t type = pmemobj_type_num(oid);
    if (type != kEntryType && type != kBucketArrayType) continue;
    uint64_t usable = pmemobj_alloc_usable_size(oid);
    if (usable > pool_bytes - oid.off) continue;  // cannot be a real object
    if (type == kEntryType) {
      entries.emplace(oid.off, usable);
    } else if (oid.off == root_->buckets.off && usable >= n * sizeof(uint64_t)) {
      bucket_array_ok = true;
    }
  }
  if (!bucket_array_ok || root_->buckets.pool_uuid_lo != uuid_lo_) {
    return Status::Corruption(path + ": bucket array damaged (not an allocated array of " +
                              std::to_string(n) + " buckets)");
  }
  buckets_ = static_cast<uint64_t*>(pmemobj_direct(root_->buckets));
  bucket_mask_ = n - 1;

  std::unordered_set<uint64_t> reachable;
  reachable.reserve(entries.size());
  auto structural = [&](std::string line) {
    if (rec->first_structural.empty()) rec->first_structural = line;
    if (rec->report != nullptr) ++rec->report->links_damaged;
    rec->Problem(std::move(line));
  };
  for (uint64_t b = 0; b < n; ++b) {
    uint64_t off = buckets_[b];
    uint64_t from = 0;  // offset of the entry holding the link, 0 = the bucket slot
    while (off != 0) {
      auto it = entries.find(off);
      std::string where = "bucket " + std::to_string(b) +
                          (from == 0 ? " head" : ", link in entry at " + Hex(from));
      if (it == entries.end()) {
        structural(where + ": points at " + Hex(off) + ", not an allocated entry");
        break;
      }
      if (!reachable.insert(off).second) {
        structural(where + ": points back at entry " + Hex(off) + " (cycle or shared entry)");
        break;
      }
      const Entry* e = At(off);
      const uint64_t usable = it->second;
      std::string problem;
      bool key_readable = false;
      if (!EntryBoundsOk(e, usable)) {
        problem = "lengths do not fit its " + std::to_string(usable) + "-byte object";
      } else if (e->check != EntryCheck(e)) {
        key_readable = true;
        problem = "checksum mismatch";
      } else if ((e->hash & bucket_mask_) != b || HashKey(e->Key()) != e->hash) {
        // Intact, but linked from the wrong chain: a damaged link elsewhere.
        if (rec->report != nullptr) ++rec->report->links_damaged;
        rec->Problem(where + ": entry for key \"" + Printable(e->Key()) +
                     "\" belongs to bucket " + std::to_string(e->hash & bucket_mask_));
        if (rec->report != nullptr) rec->intact.push_back(off);
        quarantine_.emplace(off, false);
        ++rec->damaged;
        from = off;
        off = e->next;
        continue;
      }
      if (!problem.empty()) {
        ++rec->damaged;
        if (rec->report != nullptr) ++rec->report->entries_damaged;
        rec->Problem("entry at " + Hex(off) + " (bucket " + std::to_string(b) +
                     (key_readable ? ", key \"" + Printable(e->Key()) + "\"" : std::string()) +
                     "): " + problem);
        quarantine_.emplace(off, key_readable);
      } else {
        stripes_[b % kLockStripes].count.fetch_add(1, std::memory_order_relaxed);
        if (rec->report != nullptr) {
          ++rec->report->entries_ok;
          rec->intact.push_back(off);
        }
      }
      from = off;
      off = e->next;
    }
  }
  if (!rec->first_structural.empty() && rec->report == nullptr) {
    return Status::Corruption(path + ": " + rec->first_structural +
                              " (nvmw check --salvage copies what is intact)");
  }
  if (rec->damaged > 0 && options_.paranoid_checks && rec->report == nullptr) {
    return Status::Corruption(path + ": " + std::to_string(rec->damaged) +
                              " damaged entries (paranoid_checks)");
  }
  has_quarantine_.store(!quarantine_.empty(), std::memory_order_release);

  // Puts publish atomically, so an allocated entry that no chain reaches only
  // exists when a link was damaged: then it may be the only copy of a key, and
  // it is left for salvage. On an intact pool, the sweep guarantees that no
  // space can ever leak.
  std::vector<PMEMoid> orphans;
  for (const auto& [off, usable] : entries) {
    if (reachable.count(off) != 0) continue;
    orphans.push_back(PMEMoid{uuid_lo_, off});
    if (rec->report != nullptr) rec->unreachable.emplace_back(off, usable);
  }
  if (rec->report != nullptr) {
    rec->report->unreachable = orphans.size();
    if (!orphans.empty()) {
      rec->Problem(std::to_string(orphans.size()) +
                   " allocated entries are reachable from no bucket (cut off by a damaged link)");
    }
    return Status::OK();
  }
  if (rec->damaged == 0 && rec->first_structural.empty()) {
    for (PMEMoid& oid : orphans) pmemobj_free(&oid);
  }
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
    // Checksum from the caller's buffer (in cache) rather than from the pool,
    // then a non-temporal copy of the bulk and one flush of the header (+key,
    // padding) whose drain also orders the copy.
    std::memset(e->key + key.size(), 0, value_off - head);
    e->check = Hash2(reinterpret_cast<const char*>(e) + kCheckedFrom, value_off - kCheckedFrom,
                     value.data(), value.size());
    pmemobj_memcpy(pop_, dst, value.data(), value.size(),
                   PMEMOBJ_F_MEM_NODRAIN | PMEMOBJ_F_MEM_NONTEMPORAL);
    pmemobj_persist(pop_, e, value_off);
  } else {
    if (!value.empty()) std::memcpy(dst, value.data(), value.size());
    e->check = EntryCheck(e);
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
    bool old_readable = false;
    const bool old_quarantined = old != nullptr && Quarantined(Off(old), &old_readable);
    if (old != nullptr) {
      if (old->next != 0) pmemobj_set_value(pop_, &acts[nacts++], &e->next, old->next);
      pmemobj_defer_free(pop_, PMEMoid{uuid_lo_, Off(old)}, &acts[nacts++]);
      // Drop the quarantine mark before the space can be reused by another entry.
      if (old_quarantined) Unquarantine(Off(old));
    }
    pmemobj_set_value(pop_, &acts[nacts++], link, oid.off);
    if (pmemobj_publish(pop_, acts, nacts) != 0) {
      int err = errno;
      pmemobj_cancel(pop_, acts, nacts);
      if (old_quarantined) {
        std::lock_guard g(quarantine_mu_);
        quarantine_.emplace(Off(old), old_readable);
      }
      return err == ENOMEM ? Status::NoSpace("pool full: cannot log the update")
                           : Status::IOError("pmemobj_publish: " + PmemError());
    }
    if (old == nullptr || old_quarantined) {
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
  bool old_readable = false;
  const bool old_quarantined = Quarantined(Off(old), &old_readable);
  // Unlink and free in one redo-logged publish: after a crash the key is
  // either fully present or fully gone, and its space never leaks.
  pobj_action acts[2];
  pmemobj_set_value(pop_, &acts[0], link, old->next);
  pmemobj_defer_free(pop_, PMEMoid{uuid_lo_, Off(old)}, &acts[1]);
  if (old_quarantined) Unquarantine(Off(old));
  if (pmemobj_publish(pop_, acts, 2) != 0) {
    int err = errno;
    pmemobj_cancel(pop_, acts, 2);
    if (old_quarantined) {
      std::lock_guard g(quarantine_mu_);
      quarantine_.emplace(Off(old), old_readable);
    }
    return err == ENOMEM ? Status::NoSpace("pool full: cannot log the removal")
                         : Status::IOError("pmemobj_publish: " + PmemError());
  }
  if (!old_quarantined) {
    stripe.count.store(stripe.count.load(std::memory_order_relaxed) - 1,
                       std::memory_order_relaxed);
  }
  return Status::OK();
}

// Removes temporary files of creators that died (their pid no longer exists).
void RemoveStaleTemps(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* ent = readdir(d)) {
    std::string name = ent->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = std::atol(name.c_str() + prefix.size());
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      unlink((dir + "/" + name).c_str());
    }
  }
  closedir(d);
}

// Builds a complete pool under a temporary name in the pool's directory and
// links it to `path` (link(2) never replaces: with several concurrent creators
// exactly one link succeeds). *exists is set when another pool won the race.
Status CreatePool(const std::string& path, const PmemOptions& options, bool* exists) {
  *exists = false;
  const std::string dir = ParentDir(path);
  const std::string prefix = "." + BaseName(path) + ".creating-";
  RemoveStaleTemps(dir, prefix);
  std::random_device rd;
  const std::string tmp = dir + "/" + prefix + std::to_string(getpid()) + "-" +
                          std::to_string((uint64_t{rd()} << 32) | rd());
  // libpmemobj sizes the heap in whole 4 KiB pages: a file with a partial page at its
  // end would then read as extended (and be refused) at every open.
  const uint64_t pool_size = options.pool_size_bytes & ~uint64_t{4095};
  PMEMobjpool* pop = pmemobj_create(tmp.c_str(), kLayout, pool_size,
                                    static_cast<mode_t>(options.file_mode & 07777));
  if (pop == nullptr) {
    int err = errno;
    std::string msg = path + ": cannot create pool: " + PmemError();
    unlink(tmp.c_str());  // pmemobj_create may leave a partial file behind
    return err == ENOSPC ? Status::NoSpace(msg) : Status::IOError(msg);
  }
  Status s;
  PMEMoid root_oid = pmemobj_root(pop, sizeof(Root));
  Root* root = OID_IS_NULL(root_oid) ? nullptr : static_cast<Root*>(pmemobj_direct(root_oid));
  const uint64_t n = RoundUpPow2(std::max<uint64_t>(options.bucket_count, 1));
  if (root == nullptr) {
    s = Status::NoSpace(path + ": cannot allocate the root object: " + PmemError());
  } else if (pmemobj_zalloc(pop, &root->buckets, n * sizeof(uint64_t), kBucketArrayType) != 0) {
    s = Status::NoSpace(path + ": pool too small for " + std::to_string(n) + " buckets: " +
                        PmemError());
  } else {
    root->magic = kMagic;
    root->version = kVersion;
    root->reserved = 0;
    root->bucket_count = n;
    root->check = RootCheck(*root);
    pmemobj_persist(pop, root, sizeof(Root));
  }
  pmemobj_close(pop);
  if (s.ok()) {
    int fd = open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
    if (link(tmp.c_str(), path.c_str()) != 0) {
      if (errno == EEXIST) {
        *exists = true;
      } else {
        s = Status::IOError(path + ": cannot link the new pool into place: " +
                            std::strerror(errno));
      }
    }
  }
  unlink(tmp.c_str());
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return s;
}

Status CheckPath(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty pool path");
  const std::string dir = ParentDir(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return Status::IOError("pool directory " + dir + " of " + path + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::IOError("pool directory " + dir + " of " + path + ": not a directory");
  }
  return Status::OK();
}

// Opens an existing pool file. Everything checkable is checked from the file
// first; whatever libpmemobj or recovery then refuses, the first 8 KB (where
// libpmemobj writes at open) are put back, so a refused file is unchanged.
Status OpenExisting(const std::string& path, const PmemOptions& options, Recovery* rec,
                    std::unique_ptr<PmemEngine>* out) {
  ImageInfo info;
  Status s = CheckImage(path, &info);
  if (!s.ok()) return s;
  PMEMobjpool* pop = pmemobj_open(path.c_str(), kLayout);
  if (pop == nullptr) {
    int err = errno;
    std::string msg = path + ": " + PmemError();
    if (err == EWOULDBLOCK || err == EAGAIN) {
      // Another process holds it: it may be writing those 8 KB; leave them be.
      return Status::IOError(path + ": pool is open in another process or engine");
    }
    RestoreHeader(path, info.header);
    if (err == ENOENT) return Status::NotFound(path + ": pool file does not exist");
    if (err == EACCES || err == EPERM || err == EROFS || err == ENOMEM) {
      return Status::IOError(msg);
    }
    return Status::Corruption("not a valid nvmw pool: " + msg);
  }
  auto pmem = std::make_unique<PmemEngine>(pop, options);
  s = pmem->Recover(path, info, rec);
  if (!s.ok()) {
    pmem.reset();  // closes the pool
    RestoreHeader(path, info.header);
    return s;
  }
  *out = std::move(pmem);
  return Status::OK();
}

}  // namespace

Status OpenPmemEngine(const std::string& path, const PmemOptions& options,
                      std::unique_ptr<Engine>* engine) {
  if (engine == nullptr) return Status::InvalidArgument("engine output pointer is null");
  if (options.bucket_count == 0 || options.bucket_count > (1ull << 32)) {
    return Status::InvalidArgument("bucket_count must be in [1, 2^32]");
  }
  Status s = CheckPath(path);
  if (!s.ok()) return s;

  struct stat st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    errno = 0;
    if (stat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) return Status::IOError(path + ": " + std::strerror(errno));
      if (!options.create_if_missing) return Status::NotFound(path + ": pool file does not exist");
      if (options.pool_size_bytes < PMEMOBJ_MIN_POOL) {
        return Status::InvalidArgument("pool_size_bytes must be at least " +
                                       std::to_string(PMEMOBJ_MIN_POOL));
      }
      bool exists = false;
      s = CreatePool(path, options, &exists);
      if (!s.ok()) return s;
      continue;  // open what is now at `path`: ours, or the pool that won the race
    }
    if (!S_ISREG(st.st_mode)) return Status::IOError(path + ": not a regular file");
    if (access(path.c_str(), R_OK | W_OK) != 0) {
      return Status::IOError(path + ": " + std::strerror(errno));
    }
    Recovery rec;
    std::unique_ptr<PmemEngine> pmem;
    s = OpenExisting(path, options, &rec, &pmem);
    if (s.IsNotFound() && attempt < 2) continue;  // removed between stat and open
    if (!s.ok()) return s;
    if (options.prefault) {
      // A single-file pool is mapped whole, header first, at the pool's base.
      madvise(const_cast<Entry*>(pmem->EntryAt(0)), static_cast<size_t>(st.st_size),
              MADV_POPULATE_WRITE);
    }
    *engine = std::move(pmem);
    return Status::OK();
  }
  return Status::IOError(path + ": cannot open or create pool");
}

namespace {

// Copies `from` to a new file `to`, keeping holes (SEEK_DATA/SEEK_HOLE), so a
// sparse 1 GB pool with little data costs little.
Status SparseCopy(const std::string& from, const std::string& to) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::IOError(from + ": " + std::strerror(errno));
  int out = open(to.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    return Status::IOError(to + ": " + std::strerror(err));
  }
  Status s;
  struct stat st;
  std::vector<char> buf(1 << 20);
  if (fstat(in, &st) != 0 || ftruncate(out, st.st_size) != 0) {
    s = Status::IOError(to + ": " + std::strerror(errno));
  }
  off_t pos = 0;
  while (s.ok() && pos < st.st_size) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) break;  // ENXIO: only a hole is left
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t p = data; p < hole && s.ok();) {
      size_t want = static_cast<size_t>(std::min<off_t>(hole - p, static_cast<off_t>(buf.size())));
      ssize_t got = pread(in, buf.data(), want, p);
      if (got <= 0 || pwrite(out, buf.data(), static_cast<size_t>(got), p) != got) {
        s = Status::IOError(to + ": copy failed: " + std::strerror(errno));
        break;
      }
      p += got;
    }
    pos = hole;
  }
  close(in);
  close(out);
  return s;
}

}  // namespace

Status CheckPmemPool(const std::string& path, const PmemCheckOptions& options,
                     PmemCheckReport* report) {
  if (report == nullptr) return Status::InvalidArgument("report output pointer is null");
  *report = PmemCheckReport();
  Status s = CheckPath(path);
  if (!s.ok()) return s;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": pool file does not exist");
    return Status::IOError(path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::IOError(path + ": not a regular file");
  if (access(path.c_str(), R_OK) != 0) return Status::IOError(path + ": " + std::strerror(errno));
  if (!options.salvage_path.empty()) {
    if (stat(options.salvage_path.c_str(), &st) == 0 || errno != ENOENT) {
      return Status::InvalidArgument(options.salvage_path +
                                     ": salvage target exists; give a new path");
    }
    s = CheckPath(options.salvage_path);
    if (!s.ok()) return s;
  }
  ImageInfo info;
  s = CheckImage(path, &info);
  report->format_version = info.format_version;
  if (!s.ok()) {
    report->problems.push_back("header: " + s.message());
    return Status::OK();
  }

  // libpmemobj writes into every pool it opens (and replays its redo log), so
  // the walk runs on a scratch copy and the checked file is never written.
  const std::string dir = options.scratch_dir.empty() ? ParentDir(path) : options.scratch_dir;
  std::random_device rd;
  const std::string scratch = dir + "/." + BaseName(path) + ".check-" + std::to_string(getpid()) +
                              "-" + std::to_string(rd());
  s = SparseCopy(path, scratch);
  if (!s.ok()) {
    unlink(scratch.c_str());
    return s;
  }
  Recovery rec;
  rec.report = report;
  std::unique_ptr<PmemEngine> src;
  PmemOptions ro;
  ro.verify_checksums = true;
  s = OpenExisting(scratch, ro, &rec, &src);
  if (!s.ok()) {
    unlink(scratch.c_str());
    std::string msg = s.message();
    size_t at = msg.find(scratch);
    if (at != std::string::npos) msg.replace(at, scratch.size(), path);
    if (s.IsIOError()) return Status::IOError(msg);
    report->problems.push_back("heap: " + msg);
    return Status::OK();
  }
  report->readable = true;

  if (!options.salvage_path.empty()) {
    PmemOptions so = options.salvage_options;
    so.create_if_missing = true;
    std::unique_ptr<Engine> out;
    s = OpenPmemEngine(options.salvage_path, so, &out);
    std::unordered_set<std::string> copied;
    auto copy = [&](const Entry* e) -> Status {
      std::string key(e->Key());
      if (!copied.insert(key).second) return Status::OK();
      Status ps = out->Put(key, e->Value());
      if (ps.ok()) ++report->salvaged;
      return ps;
    };
    for (size_t i = 0; s.ok() && i < rec.intact.size(); ++i) s = copy(src->EntryAt(rec.intact[i]));
    // Entries cut off by a damaged link: copied when intact and their key is not
    // already present (a reachable entry is the current value).
    for (size_t i = 0; s.ok() && i < rec.unreachable.size(); ++i) {
      const Entry* e = src->EntryAt(rec.unreachable[i].first);
      if (EntryBoundsOk(e, rec.unreachable[i].second) && e->check == EntryCheck(e)) s = copy(e);
    }
    if (!s.ok()) {
      src.reset();
      unlink(scratch.c_str());
      std::string msg = options.salvage_path + ": salvage failed: " + s.message();
      return s.IsNoSpace() ? Status::NoSpace(msg) : Status::IOError(msg);
    }
  }
  src.reset();
  unlink(scratch.c_str());
  return Status::OK();
}

}  // namespace nvmw
