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
// leaves nothing on media; after it, the new value is durable. PutMany does the
// same for a group of keys in distinct buckets with one drain and one publish.
// Lock stripes live in DRAM and are rebuilt at open.
//
// Damage: nothing read from the file is trusted. Before libpmemobj maps a pool,
// its header, descriptor, size and our root object are checked from the file
// (read-only); after it is mapped, every link must name an allocated entry object
// (the set comes from libpmemobj's own heap walk) and every entry's checksum must
// match, so a damaged pool is refused or its damaged entries quarantined, never
// dereferenced blindly.
//
// This file: the operations (Get/Exists in pmem_engine_impl.h, Put, Remove) and
// recovery at open. The on-media layout is in pmem_layout.h, the checks of a pool
// file before it is mapped in pmem_image.cc, creation, open and `nvmw check` in
// pmem_pool.cc.
#include <libpmemobj.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/pmem_engine_impl.h"

namespace nvmw::pmem_internal {

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
  RegisterSizeClasses();
  WarmAllocator();
  if (rec->damaged == 0 && rec->first_structural.empty()) {
    for (PMEMoid& oid : orphans) pmemobj_free(&oid);
  }
  return Status::OK();
}

void PmemEngine::WarmAllocator() {
  // libpmemobj (1.12) rebuilds its view of a zone's free space lazily, on the first
  // allocation after open. When that first happened in two threads that allocate and
  // free large and small objects at once, a kill shortly after sometimes left a heap
  // that the next open refused or that had lost objects (a later free of one of them
  // aborted in libpmemobj: "duplicate runtime chunk state, possible double free"): 6
  // of 60 runs of the two-thread SIGKILL test (tests/cpp/engine/crash_test.cc, 100
  // kills each); none in 180 once the free space is rebuilt here, on one thread, before
  // any request. One reservation of each kind, a chunk-sized one and a small one,
  // cancelled at once, does that; nothing persistent changes. docs/reliability.md has
  // the experiments.
  for (size_t bytes : {size_t{1} << 20, sizeof(Entry) + 16}) {
    pobj_action act;
    PMEMoid oid = pmemobj_xreserve(pop_, &act, bytes, kEntryType, ClassFlags(bytes));
    if (!OID_IS_NULL(oid)) pmemobj_cancel(pop_, &act, 1);
  }
}

// libpmemobj serves objects of up to 2.5 MiB from runs: blocks of chunks (256 KiB)
// cut into units of one size, and keeps one run per allocation class in use attached
// to the allocating thread's arena even when every object in it has been freed. Its
// own classes (5 % apart) have runs of 200 units, 16 chunks (4 MiB) from 20 KiB up, so
// every class a store had used held up to 4 MiB of the pool until it was closed,
// whatever the store held: in a 64 MiB pool, one value of each of 17 sizes from 20 to
// 350 KiB, all removed, left room for 18 values of 1 MiB where an empty pool takes 42,
// and a 128 MiB pool holding 12 MB refused a 540 KiB value. These classes are 2^(1/4)
// apart below 255 KiB (at most 19 % of an object unused, 9 % on average), with runs of
// one chunk, and whole chunks above, with runs of one unit: an emptied class holds one
// chunk, or one object's chunks. They reach past 2.5 MiB, where libpmemobj stops using
// runs: larger entries take whole chunks, given back as soon as they are freed. Classes
// are runtime state, registered at every open; runs record their unit size, so pools
// written with other classes open as before.
void PmemEngine::RegisterSizeClasses() {
  constexpr uint64_t kChunk = 256 << 10;
  constexpr uint64_t kRunHeader = 1024;  // run header and bitmap, with room to spare
  for (int k = 1; k <= 46; ++k) {  // 1 KiB * 2^(k/4): 1.2 KiB .. 2.8 MiB
    uint64_t unit = (static_cast<uint64_t>(1024.0 * std::exp2(k / 4.0)) + 63) & ~uint64_t{63};
    // A run of one unit takes whole chunks: the unit fills them.
    if (unit > kChunk - kRunHeader) unit = (unit + kChunk - 1) / kChunk * kChunk - kRunHeader;
    if (!size_classes_.empty() && size_classes_.back().first == unit) continue;
    pobj_alloc_class_desc desc{};
    desc.unit_size = unit;
    desc.alignment = 0;
    desc.units_per_block =
        static_cast<unsigned>(std::max<uint64_t>(1, (kChunk - kRunHeader) / unit));
    desc.header_type = POBJ_HEADER_COMPACT;
    if (pmemobj_ctl_set(pop_, "heap.alloc_class.new.desc", &desc) != 0) continue;
    size_classes_.emplace_back(unit, desc.class_id);
  }
}

uint64_t PmemEngine::ClassFlags(uint64_t bytes) const {
  constexpr uint64_t kCompactHeader = 16;  // libpmemobj's header inside each unit
  if (size_classes_.empty() || bytes + kCompactHeader <= 1024) return 0;
  for (const auto& [unit, id] : size_classes_) {
    if (bytes + kCompactHeader <= unit) return POBJ_CLASS_ID(id);
  }
  return 0;
}

Status PmemEngine::Put(std::string_view key, std::string_view value) {
  const KeyValue item{key, value};
  Status result;
  PutMany(&item, 1, &result);
  return result;
}

void PmemEngine::PutMany(const KeyValue* items, size_t n, Status* results) {
  for (size_t i = 0; i < n;) i = PutGroup(items, n, i, results);
}

Status PmemEngine::ReserveAndFill(std::string_view key, std::string_view value, uint64_t h,
                                  pobj_action* act, uint64_t* off) {
  const bool large = value.size() >= kAlignValueBytes;
  const uint64_t head = sizeof(Entry) + key.size();
  const uint64_t size = head + value.size() + (large ? 63 : 0);
  if (size > PMEMOBJ_MAX_ALLOC_SIZE) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) +
                                   " bytes exceeds libpmemobj's object limit");
  }
  // The reservation is volatile: if the process dies before the publish, the pool is
  // unchanged.
  PMEMoid oid = pmemobj_xreserve(pop_, act, size, kEntryType, ClassFlags(size));
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
  // Flushed, not drained: the caller drains once for its whole group before the
  // publish, and that drain orders these flushes (and the non-temporal copy) too.
  if (large) {
    // Checksum from the caller's buffer (in cache) rather than from the pool, then a
    // non-temporal copy of the bulk and a flush of the header (+key, padding).
    std::memset(e->key + key.size(), 0, value_off - head);
    e->check = Hash2(reinterpret_cast<const char*>(e) + kCheckedFrom, value_off - kCheckedFrom,
                     value.data(), value.size());
    pmemobj_memcpy(pop_, dst, value.data(), value.size(),
                   PMEMOBJ_F_MEM_NODRAIN | PMEMOBJ_F_MEM_NONTEMPORAL);
    pmemobj_flush(pop_, e, value_off);
  } else {
    if (!value.empty()) std::memcpy(dst, value.data(), value.size());
    e->check = EntryCheck(e);
    pmemobj_flush(pop_, e, value_off + value.size());
  }
  *off = oid.off;
  return Status::OK();
}

size_t PmemEngine::PutGroup(const KeyValue* items, size_t n, size_t first, Status* results) {
  // One group: items from `first` on, at most kPutGroupMax of them, ending before an
  // item whose bucket is already in it (so no item's chain walk or link depends on
  // another item's unpublished change; a key given twice lands in the next group).
  struct Member {
    size_t item;
    uint64_t h, b, off;
    Entry* old;
    bool old_quarantined, old_readable;
  };
  Member group[kPutGroupMax];
  // A reservation per member, then at most three more actions each (the new entry's
  // next link, the old entry's free, the link that makes the new one reachable).
  pobj_action acts[4 * kPutGroupMax];
  size_t m = 0;
  size_t i = first;
  for (; i < n && m < kPutGroupMax; ++i) {
    const std::string_view key = items[i].key;
    const std::string_view value = items[i].value;
    Status s = CheckKey(key, options_.max_key_bytes);
    if (s.ok()) s = CheckValue(value, options_.max_value_bytes);
    if (!s.ok()) {
      results[i] = s;
      continue;
    }
    const uint64_t h = HashKey(key);
    const uint64_t b = h & bucket_mask_;
    bool seen = false;
    for (size_t k = 0; k < m; ++k) seen = seen || group[k].b == b;
    if (seen) break;
    // The bucket's slot is a cache miss on a large table: start loading it now, under
    // the copy of the value (the members' misses then overlap instead of following
    // one another in step 2).
    __builtin_prefetch(&buckets_[b]);
    // 1. Reserve and fill the new entry without any lock.
    Member& g = group[m];
    s = ReserveAndFill(key, value, h, &acts[m], &g.off);
    // While the members' reservations are pending, libpmemobj may refuse one that it
    // grants once they are published (a 16 MB pool refused after a few MB of
    // overwrites). End the group here: the item goes first into the next one and is
    // NoSpace only if it does not fit alone, as for a Put.
    if (s.IsNoSpace() && m > 0) break;
    if (!s.ok()) {
      results[i] = s;
      continue;
    }
    g.item = i;
    g.h = h;
    g.b = b;
    ++m;
  }
  if (m == 0) return i;
  // Likewise the first entry of each member's chain, where its key usually is (read
  // without the lock, only to prefetch: a stale offset costs nothing but the load).
  for (size_t k = 0; k < m; ++k) {
    const uint64_t first_off = __atomic_load_n(&buckets_[group[k].b], __ATOMIC_RELAXED);
    if (first_off != 0) __builtin_prefetch(base_ + first_off);
  }
  pmemobj_drain(pop_);

  // 2. Under the members' lock stripes (taken in ascending order, each once): link each
  // new entry where its key lives (or at its chain's end) and free the one it replaces,
  // all of the group in one redo-logged publish.
  size_t stripe_ids[kPutGroupMax];
  for (size_t k = 0; k < m; ++k) stripe_ids[k] = group[k].b % kLockStripes;
  std::sort(stripe_ids, stripe_ids + m);
  const size_t nstripes = static_cast<size_t>(std::unique(stripe_ids, stripe_ids + m) - stripe_ids);
  for (size_t k = 0; k < nstripes; ++k) stripes_[stripe_ids[k]].mu.lock();
  size_t nacts = m;
  for (size_t k = 0; k < m; ++k) {
    Member& g = group[k];
    Entry* e = At(g.off);
    uint64_t* link = nullptr;
    g.old = Find(g.b, g.h, items[g.item].key, &link);
    g.old_readable = false;
    g.old_quarantined = g.old != nullptr && Quarantined(Off(g.old), &g.old_readable);
    if (g.old != nullptr) {
      if (g.old->next != 0) pmemobj_set_value(pop_, &acts[nacts++], &e->next, g.old->next);
      pmemobj_defer_free(pop_, PMEMoid{uuid_lo_, Off(g.old)}, &acts[nacts++]);
      // Drop the quarantine mark before the space can be reused by another entry.
      if (g.old_quarantined) Unquarantine(Off(g.old));
    }
    pmemobj_set_value(pop_, &acts[nacts++], link, g.off);
  }
  Status outcome;
  if (pmemobj_publish(pop_, acts, nacts) != 0) {
    const int err = errno;
    pmemobj_cancel(pop_, acts, nacts);
    for (size_t k = 0; k < m; ++k) {
      if (group[k].old_quarantined) {
        std::lock_guard g(quarantine_mu_);
        quarantine_.emplace(Off(group[k].old), group[k].old_readable);
      }
    }
    outcome = err == ENOMEM ? Status::NoSpace("pool full: cannot log the update")
                            : Status::IOError("pmemobj_publish: " + PmemError());
  } else {
    for (size_t k = 0; k < m; ++k) {
      if (group[k].old == nullptr || group[k].old_quarantined) {
        std::atomic<int64_t>& count = stripes_[group[k].b % kLockStripes].count;
        count.store(count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
    }
  }
  for (size_t k = nstripes; k-- > 0;) stripes_[stripe_ids[k]].mu.unlock();
  for (size_t k = 0; k < m; ++k) results[group[k].item] = outcome;
  return i;
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
  // A miss answers as a lookup does: Corruption, removing nothing, when an entry
  // quarantined at open in the chain may be this key's own ("nothing was there" would
  // be a guess), NotFound otherwise.
  if (old == nullptr) return Missing(b, key);
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

}  // namespace nvmw::pmem_internal
