// The pmem engine's internal state and the functions its source files share, one
// file per role: pmem_engine.cc (Get/Put/Remove and recovery at open),
// pmem_image.cc (checks of a pool file from the file itself, before libpmemobj
// maps it, and putting its header back after a refused open) and pmem_pool.cc
// (atomic creation, open, OpenPmemEngine, and CheckPmemPool: `nvmw check` and
// salvage). The on-media layout and its checksums are in pmem_layout.h;
// docs/engine.md explains the layout, the crash-consistency argument and the
// handling of damaged pools.
#ifndef NVMW_ENGINE_PMEM_ENGINE_IMPL_H_
#define NVMW_ENGINE_PMEM_ENGINE_IMPL_H_

#include <libpmemobj.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/engine_util.h"
#include "engine/pmem_layout.h"
#include "nvmw/engine.h"

namespace nvmw::pmem_internal {

using engine_internal::CheckKey;
using engine_internal::CheckValue;
using engine_internal::HashKey;

// Volatile lock stripes; a bucket b is guarded by stripe b % kLockStripes.
inline constexpr uint64_t kLockStripes = 1024;

// Bytes from a damaged or foreign file go into messages escaped, so a message is
// always printable ASCII (and valid UTF-8 for the Python binding).
inline std::string Printable(std::string_view s, size_t max = 64) {
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

inline std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::string PmemError() {
  const char* msg = pmemobj_errormsg();
  return (msg != nullptr && *msg != '\0') ? msg : std::strerror(errno);
}

// Facts read from a pool file before libpmemobj maps it.
struct ImageInfo {
  uint64_t file_bytes = 0;
  uint64_t heap_offset = 0;
  uint64_t root_offset = 0;
  uint32_t format_version = 0;
  bool nvmw_pool = false;  // layout name (or root magic, the name damaged) of this format
  std::string header;  // the first kHeaderBytes as they were
};

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

  ~PmemEngine() override {
    StopHugePages();
    pmemobj_close(pop_);
  }

  // Starts the background pass that backs the pool's mapping (its first `bytes`)
  // with 2 MiB pages (PmemOptions::huge_pages; pmem_pool.cc has the details).
  void StartHugePages(size_t bytes);
  // Waits for that pass to end; returns the bytes it left backed by 2 MiB pages
  // (0 when it never ran or the kernel or filesystem cannot do it).
  uint64_t WaitHugePages();

  // Validates the root and the bucket array, then walks every chain: each link
  // must name an allocated entry object (libpmemobj's heap walk gives the set),
  // each entry's lengths must fit its object and its checksum must match.
  // Damaged entries are quarantined; a bad link or a cycle fails the open
  // (Corruption) unless rec->report is set (check mode). Rebuilds the volatile
  // counts and, on an undamaged pool, frees entry objects no chain reaches.
  Status Recover(const std::string& path, const ImageInfo& info, Recovery* rec);
  // Makes libpmemobj rebuild its free-space view now, on the opening thread (see the
  // definition for why).
  void WarmAllocator();
  // Registers the allocation classes entries of 1 KiB to 2.8 MiB are reserved from
  // (runs of one chunk or one unit instead of libpmemobj's up to 16 chunks; see the
  // definition).
  void RegisterSizeClasses();

  Status Get(std::string_view key, const ValueFn& fn) override {
    return WithServable(key, [&](const Entry* e) {
      fn(e->Value());  // straight from the pool; the shared lock pins the entry
    });
  }

  Status Exists(std::string_view key) override {
    return WithServable(key, [](const Entry*) {});
  }

  Status Put(std::string_view key, std::string_view value) override;
  void PutMany(const KeyValue* items, size_t n, Status* results) override;
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

  // Looks `key` up under its stripe's shared lock and, when its entry is there and
  // servable, calls use(entry) with the lock still held.
  template <typename Use>
  Status WithServable(std::string_view key, Use&& use) {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    uint64_t b = h & bucket_mask_;
    std::shared_lock lock(stripes_[b % kLockStripes].mu);
    const Entry* e = Find(b, h, key, nullptr);
    if (e == nullptr) return Missing(b, key);
    s = Servable(e, key);
    if (!s.ok()) return s;
    use(e);
    return Status::OK();
  }

  // What a lookup or Remove of `key` that found nothing in bucket b answers (lock held).
  // NotFound, unless the chain holds an entry quarantined at open that may be this key's
  // own: one whose lengths cannot be read (or that a damaged link put in this chain), one
  // that holds this very key under a damaged hash, or one whose key bytes do not hash to
  // its stored hash. The last has a damaged key, a damaged hash or both; once the hash
  // may be damaged nothing left says whose entry it was, so it may be the entry of any
  // key that misses in this chain. No key compares equal to it, so without this its key
  // would read as absent: a written key silently gone. Corruption instead, as for a hit
  // on a damaged entry. An entry whose key and hash agree (damaged elsewhere, say in its
  // value) is that key's alone: the chain's other keys stay NotFound, and lookups in
  // other buckets are not affected.
  Status Missing(uint64_t b, std::string_view key) const {
    if (!has_quarantine_.load(std::memory_order_acquire)) return Status::NotFound();
    for (uint64_t off = buckets_[b]; off != 0; off = At(off)->next) {
      bool readable = false;
      if (!Quarantined(off, &readable)) continue;
      const Entry* e = At(off);
      const bool maybe_ours = !readable || e->Key() == key || HashKey(e->Key()) != e->hash;
      if (maybe_ours) {
        return Status::Corruption("key \"" + Printable(key) +
                                  "\": not found, but an entry damaged at open in its bucket may be "
                                  "its own; not answered (nvmw check lists the damage)");
      }
    }
    return Status::NotFound();
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

  void StopHugePages();

  // pmemobj_xreserve flags for an entry object of `bytes`: the smallest class of
  // size_classes_ that holds it, or 0 (libpmemobj's own choice) outside their range.
  uint64_t ClassFlags(uint64_t bytes) const;

  // Reserves an entry for key/value (hash h), fills and flushes it without draining;
  // *off is its pool offset. The reservation goes into *act, for a publish or cancel.
  Status ReserveAndFill(std::string_view key, std::string_view value, uint64_t h,
                        pobj_action* act, uint64_t* off);
  // Publishes one group of PutMany's items starting at `first` (see its definition);
  // returns the index of the first item it did not take.
  size_t PutGroup(const KeyValue* items, size_t n, size_t first, Status* results);

  PMEMobjpool* const pop_;
  char* const base_;
  const PmemOptions options_;
  Root* root_ = nullptr;
  uint64_t uuid_lo_ = 0;  // pool id half of every PMEMoid in this pool
  uint64_t* buckets_ = nullptr;
  uint64_t bucket_mask_ = 0;
  std::vector<Stripe> stripes_;
  // Allocation classes of this open, ascending by unit size: {unit bytes, class id}.
  std::vector<std::pair<uint64_t, unsigned>> size_classes_;
  std::atomic<bool> has_quarantine_{false};
  mutable std::mutex quarantine_mu_;
  std::unordered_map<uint64_t, bool> quarantine_;
  std::thread huge_thread_;
  std::atomic<bool> huge_stop_{false};
  std::atomic<uint64_t> huge_bytes_{0};
};

// pmem_image.cc: checks of a pool file from the file, without writing, before
// libpmemobj maps it; and putting back the header libpmemobj wrote into a file
// whose open was then refused.
Status CheckImage(const std::string& path, ImageInfo* info);
void RestoreHeader(const std::string& path, const std::string& saved);

// pmem_pool.cc: the pool file's life (atomic creation, open and recovery, the
// scratch copy `nvmw check` walks).
Status CreatePool(const std::string& path, const PmemOptions& options, bool* exists);
Status CheckPath(const std::string& path);
Status OpenExisting(const std::string& path, const PmemOptions& options, Recovery* rec,
                    std::unique_ptr<PmemEngine>* out);
Status SparseCopy(const std::string& from, const std::string& to);

}  // namespace nvmw::pmem_internal

#endif  // NVMW_ENGINE_PMEM_ENGINE_IMPL_H_
