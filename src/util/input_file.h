// OpenInputFile: fopen(path, "rb") for a file read whole, without the two ways that open
// goes wrong on what is not a regular file. The open does not wait for a writer, so a
// FIFO that no one writes reads as empty (fopen blocked until one came, forever and
// through Ctrl-C); a directory is EISDIR at the open, not a read error later.
#ifndef NVMW_UTIL_INPUT_FILE_H_
#define NVMW_UTIL_INPUT_FILE_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace nvmw {

// 0 and the open file in *file (the caller fcloses it), or the errno of the failure.
inline int OpenInputFile(const std::string& path, std::FILE** file) {
  *file = nullptr;
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st;
  int err = 0;
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (S_ISDIR(st.st_mode)) {
    err = EISDIR;
  } else {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) err = errno;
  }
  if (err == 0 && (*file = ::fdopen(fd, "rb")) == nullptr) err = errno;
  if (err != 0) ::close(fd);
  return err;
}

}  // namespace nvmw

#endif  // NVMW_UTIL_INPUT_FILE_H_
