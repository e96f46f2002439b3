// The pmem engine's on-media layout (format version 2) and its checksums: the
// layout name and magic, libpmemobj type numbers, the root object and the entry
// object, and the XXH3 helpers that check them. Shared by the engine's source
// files: pmem_engine.cc (operations and recovery), pmem_image.cc (checks of a
// pool file before libpmemobj maps it) and pmem_pool.cc (creation, open, check
// and salvage). docs/engine.md describes the layout and the crash-consistency
// argument; a change here is a change of the on-media format.
#ifndef NVMW_ENGINE_PMEM_LAYOUT_H_
#define NVMW_ENGINE_PMEM_LAYOUT_H_

#include <libpmemobj.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nvmw {
namespace engine_internal {
uint64_t Xxh3Avx2(const void* data, size_t n);  // entry_checksum_avx2.cc
uint64_t Xxh3Avx2Two(const void* a, size_t na, const void* b, size_t nb);
}  // namespace engine_internal

namespace pmem_internal {

// The layout name carries the on-media format version. Version 1 (no entry
// checksums) is refused with a message that names it; see docs/engine.md.
inline constexpr const char* kLayout = "nvmw-kv-2";
inline constexpr const char* kLayoutPrefix = "nvmw-kv-";
inline constexpr uint64_t kMagic = 0x32564B574D564E00ull;  // "\0NVMWKV2" little-endian
inline constexpr uint32_t kVersion = 2;

// pmemobj type numbers, so recovery can tell our objects apart.
inline constexpr uint64_t kBucketArrayType = 1;
inline constexpr uint64_t kEntryType = 2;

// Values from this size up are placed on a 64-byte boundary inside their entry,
// so non-temporal copies into and out of the pool run on whole cache lines.
inline constexpr uint64_t kAlignValueBytes = 4096;

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

inline uint64_t RootCheck(const Root& r) { return XXH3_64bits(&r, offsetof(Root, check)); }

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
inline constexpr size_t kCheckedFrom = offsetof(Entry, hash);

// Large inputs go to the AVX2 build of XXH3 where the CPU has it (about twice the
// SSE2 speed); short ones stay inline.
inline const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
inline constexpr size_t kAvx2From = 2048;

inline uint64_t Hash(const void* data, size_t n) {
  if (n >= kAvx2From && kHaveAvx2) return engine_internal::Xxh3Avx2(data, n);
  return XXH3_64bits(data, n);
}

// The hash of a followed by b, as if contiguous.
inline uint64_t Hash2(const void* a, size_t na, const void* b, size_t nb) {
  if (kHaveAvx2) return engine_internal::Xxh3Avx2Two(a, na, b, nb);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, a, na);
  XXH3_64bits_update(&state, b, nb);
  return XXH3_64bits_digest(&state);
}

inline uint64_t EntryCheck(const Entry* e) {
  return Hash(reinterpret_cast<const char*>(e) + kCheckedFrom,
              e->value_off + e->value_len - kCheckedFrom);
}

// Header lengths that stay inside an object of `usable` bytes.
inline bool EntryBoundsOk(const Entry* e, uint64_t usable) {
  return usable >= sizeof(Entry) && e->key_len > 0 && e->key_len <= usable - sizeof(Entry) &&
         e->value_off >= sizeof(Entry) + e->key_len && e->value_off <= usable &&
         e->value_len <= usable - e->value_off;
}

}  // namespace pmem_internal
}  // namespace nvmw

#endif  // NVMW_ENGINE_PMEM_LAYOUT_H_
