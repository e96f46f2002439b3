// Checks of a pmem pool file from the file itself, read-only, before libpmemobj
// maps it (libpmemobj writes runtime fields into a pool at every open and trusts
// its headers and lane logs), and putting the header back after a refused open,
// so a file nvmw refuses is left unchanged. See docs/engine.md, "Damage".
#include <fcntl.h>
#include <libpmemobj.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "engine/pmem_engine_impl.h"

namespace nvmw::pmem_internal {
namespace {

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

}  // namespace

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
  std::string& h = info->header;
  h.assign(kHeaderBytes, '\0');
  Root root{};
  const ssize_t got = pread(fd, h.data(), kHeaderBytes, 0);
  if (got < 0) {  // e.g. EIO: the check could not read the file, which says nothing of it
    int err = errno;
    close(fd);
    return Status::IOError(path + ": " + std::strerror(err));
  }
  const bool read_ok = got == static_cast<ssize_t>(kHeaderBytes);
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
  // Whose file this is, told apart from damage: the layout name (outside the pool
  // header's checksum, so a damaged pool header leaves it readable) names an nvmw
  // pool of this format, or, where the descriptor's checksum fails (the name itself
  // may be what is damaged), the root object carries this format's magic. A foreign
  // name its checksum vouches for is another program's pool.
  const char* layout = h.data() + kDescOff;
  const size_t layout_len = strnlen(layout, PMEMOBJ_MAX_LAYOUT);
  const std::string_view name(layout, layout_len);
  if (layout_len < PMEMOBJ_MAX_LAYOUT && name.substr(0, 8) == kLayoutPrefix) {
    info->format_version = static_cast<uint32_t>(std::atoi(std::string(name.substr(8)).c_str()));
  }
  const bool desc_ok = read_ok && PmemChecksumOk(h.data() + kDescOff, kDescBytes, kDescBytes - 8,
                                                 kDescBytes);
  info->nvmw_pool = name == kLayout || (!desc_ok && root_read && root.magic == kMagic);
  if (info->nvmw_pool) info->format_version = kVersion;
  if (size < PMEMOBJ_MIN_POOL) {
    if (info->nvmw_pool) {
      return Status::Corruption(path + ": nvmw pool truncated to " + std::to_string(size) +
                                " bytes (smaller than any pmemobj pool)");
    }
    return Status::Corruption(path + ": not an nvmw pool (" + std::to_string(size) +
                              " bytes, smaller than any pmemobj pool)");
  }
  if (!read_ok || std::memcmp(h.data(), "PMEMOBJ", 8) != 0) {
    if (info->nvmw_pool) {
      return Status::Corruption(path + ": pool header damaged (no PMEMOBJ signature; the layout "
                                "name is \"" + kLayout + "\")");
    }
    return Status::Corruption(path + ": not a pmemobj pool (no PMEMOBJ signature)");
  }
  uint32_t incompat;
  std::memcpy(&incompat, h.data() + kPoolHdrIncompatOff, 4);
  size_t hdr_end = (incompat & kPoolFeatCksum2K) ? 2048 : kPoolHdrChecksumOff;
  if (!PmemChecksumOk(h.data(), 4096, kPoolHdrChecksumOff, hdr_end)) {
    return Status::Corruption(path + ": pool header damaged (checksum mismatch)");
  }
  if (layout_len == PMEMOBJ_MAX_LAYOUT || name != kLayout) {
    if (info->format_version == 1) {
      return Status::Corruption(
          path + ": nvmw pool format version 1 (layout \"nvmw-kv-1\", entries without "
          "checksums); this nvmw reads format version 2 only: recreate the pool");
    }
    if (info->nvmw_pool) {
      return Status::Corruption(path + ": pool descriptor damaged (layout name \"" +
                                Printable(name) + "\" fails its checksum; the root object is "
                                "an nvmw pool's)");
    }
    return Status::Corruption(path + ": pool has layout \"" + Printable(name) + "\", expected \"" +
                              kLayout + "\"");
  }
  if (!desc_ok) {
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

}  // namespace nvmw::pmem_internal
