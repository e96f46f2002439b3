// Status formatting.
#include "nvmw/status.h"

namespace nvmw {

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kIOError: return "IOError";
    case Code::kCorruption: return "Corruption";
    case Code::kNoSpace: return "NoSpace";
    case Code::kOverloaded: return "Overloaded";
    case Code::kShutdown: return "Shutdown";
    case Code::kNotSupported: return "NotSupported";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code_);
  if (!msg_.empty()) {
    s += ": ";
    s += msg_;
  }
  return s;
}

}  // namespace nvmw
