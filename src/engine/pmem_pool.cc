// The life of a pmem pool file: atomic creation (a complete pool under a
// temporary name, linked into place), open (image checks, libpmemobj, recovery,
// and the header put back when the open is refused), OpenPmemEngine, and
// CheckPmemPool (`nvmw check`), which walks a scratch copy and can salvage what
// is intact into a new pool. See docs/engine.md.
#include <dirent.h>
#include <fcntl.h>
#include <libpmemobj.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/pmem_engine_impl.h"

// Linux 6.1's value (the ABI); older C library headers lack the name, older kernels
// answer EINVAL.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace nvmw {
namespace pmem_internal {
namespace {

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

}  // namespace

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
    // libpmemobj's message names the temporary file, which the user never asked for
    // and which is gone by now: it names the pool instead.
    std::string why = PmemError();
    for (size_t at = why.find(tmp); at != std::string::npos; at = why.find(tmp, at + path.size())) {
      why.replace(at, tmp.size(), path);
    }
    std::string msg = path + ": cannot create pool: " + why;
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

}  // namespace pmem_internal

using pmem_internal::BaseName;
using pmem_internal::CheckImage;
using pmem_internal::CheckPath;
using pmem_internal::CreatePool;
using pmem_internal::Entry;
using pmem_internal::EntryBoundsOk;
using pmem_internal::EntryCheck;
using pmem_internal::ImageInfo;
using pmem_internal::OpenExisting;
using pmem_internal::ParentDir;
using pmem_internal::PmemEngine;
using pmem_internal::Recovery;
using pmem_internal::SparseCopy;

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
    // A single-file pool is mapped whole, header first, at the pool's base.
    void* base = const_cast<Entry*>(pmem->EntryAt(0));
    const size_t mapped = static_cast<size_t>(st.st_size);
    if (options.prefault) (void)madvise(base, mapped, MADV_POPULATE_WRITE);
    if (options.huge_pages) pmem->StartHugePages(mapped);
    *engine = std::move(pmem);
    return Status::OK();
  }
  return Status::IOError(path + ": cannot open or create pool");
}

namespace pmem_internal {

// Every request walks the bucket array and entries spread over the pool. With 4 KiB
// pages those walks miss the TLB, and in a virtual machine each miss is a two-level
// page walk: on a 2-vCPU VM the first load of a key's chain was most of a 128 B Put's
// own time. A DAX mapping of persistent memory gets 2 MiB pages from the kernel when
// the mapping is aligned (libpmem aligns it); a pool file on tmpfs, which libpmem
// allocates in 4 KiB pages when it creates it, does not. MADV_COLLAPSE (Linux 6.1)
// asks the kernel to move a range of such a mapping to a 2 MiB page, whatever the
// mount's huge= setting, as khugepaged would: the data and the addresses stay, only the
// page table changes. It copies 2 MiB per call, so one thread does the whole pool in
// the background, at idle CPU priority, while requests are served (a request touching
// the range being moved waits for that one copy).
void PmemEngine::StartHugePages(size_t bytes) {
  huge_thread_ = std::thread([this, bytes] {
    (void)pthread_setname_np(pthread_self(), "nvmw-hugepages");
    sched_param sp{};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);  // best effort
    constexpr uintptr_t kHuge = uintptr_t{2} << 20;
    const uintptr_t start = reinterpret_cast<uintptr_t>(base_);
    const uintptr_t end = (start + bytes) & ~(kHuge - 1);
    for (uintptr_t a = (start + kHuge - 1) & ~(kHuge - 1); a < end; a += kHuge) {
      if (huge_stop_.load(std::memory_order_relaxed)) break;
      if (madvise(reinterpret_cast<void*>(a), kHuge, MADV_COLLAPSE) == 0) {
        huge_bytes_.fetch_add(kHuge, std::memory_order_relaxed);
      } else if (errno == EINVAL || errno == ENOSYS) {
        break;  // this kernel, filesystem or mapping cannot (a DAX mapping needs not)
      }
      // EAGAIN, ENOMEM, EBUSY: this range stays in 4 KiB pages; try the next.
    }
  });
}

uint64_t PmemEngine::WaitHugePages() {
  if (huge_thread_.joinable()) huge_thread_.join();
  return huge_bytes_.load(std::memory_order_relaxed);
}

void PmemEngine::StopHugePages() {
  huge_stop_.store(true, std::memory_order_relaxed);
  if (huge_thread_.joinable()) huge_thread_.join();
}

}  // namespace pmem_internal

namespace {

// Whether another process has the pool at `path` open: libpmemobj holds an exclusive
// flock on every pool file it opens, so a shared one cannot be taken meanwhile.
bool HeldElsewhere(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // drops the shared lock if it was taken
  return held;
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
    // lstat: a dangling symbolic link is a name in use too (creating through it would
    // write wherever it points).
    if (lstat(options.salvage_path.c_str(), &st) == 0) {
      return Status::InvalidArgument(options.salvage_path +
                                     ": salvage target exists; give a new path");
    }
    if (errno != ENOENT) {  // e.g. ENOTDIR: a component of the path is a file
      return Status::InvalidArgument(options.salvage_path + ": " + std::strerror(errno));
    }
    s = CheckPath(options.salvage_path);
    if (!s.ok()) return s;
  }
  ImageInfo info;
  s = CheckImage(path, &info);
  report->format_version = info.format_version;
  report->nvmw_pool = info.nvmw_pool;
  if (!s.ok()) {
    if (s.IsIOError()) return s;  // not read: says nothing of the pool
    report->problems.push_back("header: " + s.message());
    return Status::OK();
  }

  if (HeldElsewhere(path)) {
    // A copy read while that process can write is not one state of the pool: it can
    // look damaged where the pool is not (libpmemobj refused such copies' heaps).
    return Status::IOError(path + ": pool is open in another process or engine; check it "
                                  "once that one has closed it");
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
      if (out != nullptr) {
        // Kept, not deleted: what it holds may be all that is left of the data. Said
        // here so that nobody takes it for a complete salvage.
        out.reset();
        msg += "; that pool is kept, holding only the " + std::to_string(report->salvaged) +
               " entries copied before this (a larger salvage pool would hold them all)";
      }
      return s.IsNoSpace() ? Status::NoSpace(msg) : Status::IOError(msg);
    }
  }
  src.reset();
  unlink(scratch.c_str());
  return Status::OK();
}

}  // namespace nvmw
