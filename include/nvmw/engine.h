// Engine: the key-value store behind the middleware. Two implementations:
//   PmemEngine   - crash-consistent persistent concurrent hash map on libpmemobj,
//                  in a pool file (the role pmemkv's `cmap` played in the thesis).
//   MemoryEngine - sharded in-DRAM hash map with the same interface (tests, DRAM baseline).
//
// Thread safety: every method may be called from any number of threads at once.
// Keys are arbitrary bytes (1 byte .. Options::max_key_bytes); values 0 bytes ..
// Options::max_value_bytes.
// Durability (PmemEngine): when Put or Remove returns OK, its transaction has
// committed and the change survives a crash (SIGKILL, power loss on real pmem).
#ifndef NVMW_ENGINE_H_
#define NVMW_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nvmw/status.h"

namespace nvmw {

// Receives a value in place. The view is valid only during the call; the
// callback must not call back into the engine.
using ValueFn = std::function<void(std::string_view value)>;

// One key and its value, for PutMany.
struct KeyValue {
  std::string_view key;
  std::string_view value;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // If `key` exists, calls fn(value) once while the value is pinned and returns OK;
  // otherwise returns NotFound and does not call fn. Zero-copy form.
  virtual Status Get(std::string_view key, const ValueFn& fn) = 0;

  // Copying form: on OK stores the value in *value; on NotFound leaves it unchanged.
  Status Get(std::string_view key, std::string* value) {
    return Get(key, [value](std::string_view v) { value->assign(v.data(), v.size()); });
  }

  // Inserts or replaces. Atomic: a reader sees the old or the new value, never a mix.
  // InvalidArgument for an empty/oversized key or oversized value; NoSpace when the
  // pool is full (the old value, if any, is kept).
  virtual Status Put(std::string_view key, std::string_view value) = 0;

  // Puts n keys in order: results[i] is what Put(items[i].key, items[i].value) would
  // have returned (a key given twice ends with its later value). Each OK item is
  // durable when the call returns. The default is one Put per item. PmemEngine makes
  // consecutive items durable together, with one drain and one redo-logged publish
  // per group of up to kPutGroupMax items whose hash buckets differ, which costs less
  // than a Put each; after a crash each such group is there whole or not at all.
  virtual void PutMany(const KeyValue* items, size_t n, Status* results) {
    for (size_t i = 0; i < n; ++i) results[i] = Put(items[i].key, items[i].value);
  }

  // Removes `key`: OK if it existed, NotFound otherwise.
  virtual Status Remove(std::string_view key) = 0;

  // OK if `key` exists, NotFound otherwise.
  virtual Status Exists(std::string_view key) = 0;

  // On a pmem pool opened with damaged entries (quarantined, see PmemOptions), Get,
  // Exists and Remove answer Corruption, naming the key, rather than NotFound when the
  // key's chain holds a damaged entry that may be the key's own: a store that cannot
  // rule a written key out does not call it absent. Remove then removes nothing.

  // Number of keys stored.
  virtual uint64_t Count() = 0;

  // "pmem" or "memory".
  virtual const char* Name() const = 0;
};

// The most items PmemEngine::PutMany publishes together (libpmemobj's per-thread redo
// log holds their allocations, links and frees without growing).
inline constexpr size_t kPutGroupMax = 8;

struct PmemOptions {
  // Size of the pool file when it is created (ignored when an existing pool is opened),
  // rounded down to a multiple of 4 KiB.
  // libpmem allocates the whole file when it creates the pool (posix_fallocate): the pool
  // takes its full size on the filesystem (on tmpfs, in memory) from the start.
  uint64_t pool_size_bytes = 1ull << 30;
  // Create the pool when the file does not exist. With false, a missing file is NotFound.
  bool create_if_missing = true;
  // Hash buckets, fixed when the pool is created. Chains grow past this many keys;
  // raise it for stores of many millions of keys.
  uint64_t bucket_count = 1ull << 18;
  // Largest key accepted.
  uint32_t max_key_bytes = 64 * 1024;
  // Largest value accepted (InvalidArgument above it). libpmemobj's own limit is ~16 GB.
  uint64_t max_value_bytes = 1ull << 30;
  // Map every page of the pool at open (madvise MADV_POPULATE_WRITE; contents are
  // not changed) so that first writes do not page-fault. On tmpfs a first touch
  // allocates and zeroes a 4 KB page, which costs more than copying into it; real
  // pmem (DAX) has no such cost. Open then takes time proportional to the pool
  // size (the memory was taken when the file was created): leave off for large pools
  // that stay mostly empty.
  // Best effort: ignored where the kernel lacks MADV_POPULATE_WRITE (< 5.14).
  bool prefault = false;
  // Back the pool's mapping with 2 MiB pages: after a successful open a background
  // thread at idle CPU priority asks the kernel (madvise MADV_COLLAPSE, Linux 6.1+) to
  // move the pool, 2 MiB at a time, from 4 KiB pages to 2 MiB ones; requests are served
  // meanwhile. On tmpfs this cuts the TLB misses of a request's hash-chain walk (the
  // largest share of a small Put's own time on a VM; docs/engine.md, "Huge pages").
  // Where the kernel or filesystem cannot (a disk filesystem; DAX needs not) the thread
  // ends at its first refusal. Closing the engine stops it after the current 2 MiB.
  bool huge_pages = true;
  // Verify each entry's checksum (XXH3-64 over its length fields, key and value) on
  // every Get and Exists, as LevelDB's ReadOptions::verify_checksums; a mismatch is
  // Corruption and the value is not handed out. Recovery at open verifies every
  // entry regardless, so this only guards against damage that happens while the
  // pool is open. Off by default, as in LevelDB: measured (bench/checksum_cost.py,
  // docs/engine.md) it adds 20-45 ns to a ~115 ns in-process 128 B get (+19-40 %),
  // well above a 5 % budget; on 800 KB gets it costs up to 1.3x.
  bool verify_checksums = false;
  // With false (default) an entry whose checksum fails at open is quarantined:
  // never served (Get/Exists on its key return Corruption), replaced by a Put and
  // dropped by a Remove, while the rest of the pool works; CheckPmemPool lists it.
  // With true any damaged entry makes the open fail (Corruption).
  bool paranoid_checks = false;
  // Permission bits of a pool file this call creates (before the umask).
  uint32_t file_mode = 0600;
};

// Opens (or creates) the pool at `path`. Errors: IOError for a missing directory
// or unreadable file, Corruption for a damaged pool or a file that is not an nvmw
// pool, NotFound when the file is missing and create_if_missing is false.
// On success *engine owns the open pool; destroying it closes the pool. A pool is
// open in at most one engine (and process) at a time: a second open is IOError.
// Put and Remove are atomic and durable when they return OK; on-media layout and
// recovery are described in docs/engine.md.
//
// Damaged files: the header, the root object and the pool's size are checked by
// reading the file before libpmemobj maps it; every persistent link is checked to
// point at an allocated entry object of this pool; every entry carries a checksum.
// A damaged pool never crashes the process or serves a wrong value. A failed open
// leaves the file byte for byte as it was (libpmemobj's runtime fields, which it
// writes into the first 8 KB even on its own failures, are put back). Creation is
// atomic: the pool is built under a temporary name in the same directory and
// linked into place, so a killed creator never leaves a half-made pool at `path`,
// and of several concurrent creators one creates and the others open its pool.
Status OpenPmemEngine(const std::string& path, const PmemOptions& options,
                      std::unique_ptr<Engine>* engine);

// What CheckPmemPool found. Each problem is one line naming where it is (header,
// bucket and offset of a link, key of an entry).
struct PmemCheckReport {
  // The file is an nvmw pool of the format this nvmw reads: its layout name says so,
  // or, where that name fails its checksum, its root object's magic. What the check
  // finds wrong in such a file is damage. False for a file check cannot examine: not a
  // pmemobj pool, another program's layout, an older or newer nvmw format.
  bool nvmw_pool = false;
  bool readable = false;        // header and root usable: entries could be examined
  uint32_t format_version = 0;  // on-media format version found (0 = not an nvmw pool)
  uint64_t entries_ok = 0;      // intact entries reachable from a bucket
  uint64_t entries_damaged = 0; // entries whose checksum or header is wrong
  uint64_t links_damaged = 0;   // links to no allocated entry, cycles, misplaced entries
  uint64_t unreachable = 0;     // allocated entries no chain reaches (cut off by a bad link)
  uint64_t salvaged = 0;        // entries written to the salvage pool
  std::vector<std::string> problems;
  bool clean() const { return problems.empty(); }
};

struct PmemCheckOptions {
  // When not empty: copy every intact entry (reachable ones, then unreachable
  // intact entries whose key is not already copied) into a NEW pool at this path
  // (created with `salvage_options`; an existing file is refused).
  std::string salvage_path;
  PmemOptions salvage_options;
  // Directory for the scratch copy of the pool that libpmemobj maps (it writes
  // into any pool it opens, and the checked file must stay untouched). Empty: the
  // pool's own directory. The copy keeps holes, so it costs the pool's used size.
  std::string scratch_dir;
};

// Examines the pool at `path` without modifying it and fills *report. Returns OK
// when the check ran (report->clean() says whether the pool is intact; for a file
// that is not an nvmw pool, report->nvmw_pool is false and one problem says what it
// is), NotFound when there is no such file, IOError when the file cannot be read, is
// open in another process, or the scratch copy or salvage pool cannot be made.
Status CheckPmemPool(const std::string& path, const PmemCheckOptions& options,
                     PmemCheckReport* report);

struct MemoryOptions {
  // Lock stripes; more stripes, less contention between writers.
  uint32_t shards = 64;
  uint32_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 1ull << 30;
};

std::unique_ptr<Engine> NewMemoryEngine(const MemoryOptions& options = MemoryOptions());

}  // namespace nvmw

#endif  // NVMW_ENGINE_H_
