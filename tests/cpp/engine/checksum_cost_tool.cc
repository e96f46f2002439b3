// Checksum cost of the pmem engine, side by side in one run (bench/checksum_cost.py
// runs this and keeps the JSON): put and get of 128 B and 800 KB values on two
// pools that differ only in PmemOptions::verify_checksums, rounds alternating,
// medians reported; plus the raw cost of XXH3-64 and of CRC32C (SSE4.2, 3 bytes
// per cycle at best) over the same sizes, which chose the entry checksum.
//
// Usage: checksum_cost_tool DIR [ROUNDS]   (run with PMEM_IS_PMEM_FORCE=1)
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "nvmw/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__attribute__((target("sse4.2"))) uint32_t Crc32c(const char* p, size_t n) {
  uint64_t c = 0xffffffffu;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; i < n; ++i) c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(p[i]));
  return ~c32;
}

template <typename F>
double NsPerOp(int n, F&& f) {
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

volatile uint64_t g_sink;

}  // namespace

namespace nvmw::engine_internal {
uint64_t Xxh3Avx2(const void* data, size_t n);  // src/engine/entry_checksum_avx2.cc
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [ROUNDS]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  struct Size {
    const char* name;
    size_t bytes;
    int keys;
  };
  const Size sizes[] = {{"128B", 128, 20000}, {"800KB", 800 * 1024, 48}};

  std::unique_ptr<nvmw::Engine> eng[2];  // [0] verify off, [1] verify on
  for (int v = 0; v < 2; ++v) {
    nvmw::PmemOptions o;
    o.pool_size_bytes = 512ull << 20;
    o.bucket_count = 1 << 16;
    o.prefault = true;
    o.verify_checksums = v == 1;
    std::string path = dir + "/checksum-cost-" + std::to_string(v) + ".pool";
    std::filesystem::remove(path);
    nvmw::Status s = nvmw::OpenPmemEngine(path, o, &eng[v]);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }

  std::printf("{\n  \"rounds\": %d,\n  \"results\": {\n", rounds);
  bool first = true;
  for (const Size& sz : sizes) {
    std::string value(sz.bytes, 'x');
    for (size_t i = 0; i < value.size(); i += 64) value[i] = static_cast<char>(i * 131);
    std::vector<std::string> keys;
    for (int i = 0; i < sz.keys; ++i) keys.push_back("bench-key-" + std::to_string(i));
    const int put_ops = sz.bytes > 4096 ? 200 : 40000;
    const int get_ops = sz.bytes > 4096 ? 400 : 100000;
    std::vector<double> put_ns[2], get_ns[2], xxh_ns, avx_ns, crc_ns;
    for (int v = 0; v < 2; ++v) {
      for (const auto& k : keys) eng[v]->Put(k, value);
    }
    std::string out;
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 2; ++v) {
        int order = (r % 2 == 0) ? v : 1 - v;  // alternate which pool goes first
        put_ns[order].push_back(NsPerOp(put_ops, [&](int i) {
          if (!eng[order]->Put(keys[i % keys.size()], value).ok()) std::abort();
        }));
        get_ns[order].push_back(NsPerOp(get_ops, [&](int i) {
          if (!eng[order]->Get(keys[i % keys.size()], &out).ok()) std::abort();
        }));
      }
      xxh_ns.push_back(NsPerOp(get_ops, [&](int i) {
        g_sink = XXH3_64bits(value.data() + (i & 7), value.size() - 8);
      }));
      avx_ns.push_back(NsPerOp(get_ops, [&](int i) {
        g_sink = nvmw::engine_internal::Xxh3Avx2(value.data() + (i & 7), value.size() - 8);
      }));
      crc_ns.push_back(NsPerOp(get_ops, [&](int i) {
        g_sink = Crc32c(value.data() + (i & 7), value.size() - 8);
      }));
    }
    double get_off = Median(get_ns[0]), get_on = Median(get_ns[1]);
    double put_off = Median(put_ns[0]), put_on = Median(put_ns[1]);
    double xxh = Median(xxh_ns), avx = Median(avx_ns), crc = Median(crc_ns);
    std::printf("%s    \"%s\": {\"get_ns_verify_off\": %.1f, \"get_ns_verify_on\": %.1f, "
                "\"get_ratio\": %.3f, \"put_ns_pool_a\": %.1f, \"put_ns_pool_b\": %.1f, "
                "\"xxh3_sse2_ns\": %.1f, \"xxh3_avx2_ns\": %.1f, \"crc32c_sse42_ns\": %.1f, "
                "\"put_checksum_share\": %.3f}",
                first ? "" : ",\n", sz.name, get_off, get_on, get_on / get_off, put_off, put_on,
                xxh, avx, crc, (sz.bytes >= 2048 ? avx : xxh) / put_on);
    first = false;
  }
  std::printf("\n  }\n}\n");
  for (int v = 0; v < 2; ++v) eng[v].reset();
  for (int v = 0; v < 2; ++v) std::filesystem::remove(dir + "/checksum-cost-" + std::to_string(v) + ".pool");
  return 0;
}
