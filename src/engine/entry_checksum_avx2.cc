// XXH3-64 compiled for AVX2, used by the pmem engine's entry checksum for large
// entries when the CPU has AVX2 (the header-only build otherwise uses SSE2). XXH3
// gives the same hash on every vector path, so pools stay portable.
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace nvmw::engine_internal {

uint64_t Xxh3Avx2(const void* data, size_t n) { return XXH3_64bits(data, n); }

uint64_t Xxh3Avx2Two(const void* a, size_t na, const void* b, size_t nb) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, a, na);
  XXH3_64bits_update(&state, b, nb);
  return XXH3_64bits_digest(&state);
}

}  // namespace nvmw::engine_internal

#if defined(__clang__)
#pragma clang attribute pop
#endif
