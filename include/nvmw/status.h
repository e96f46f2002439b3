// Status: the result of every fallible nvmw call (LevelDB style). A Status is
// either OK or carries a code and a human-readable message. Cheap to copy when OK.
#ifndef NVMW_STATUS_H_
#define NVMW_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace nvmw {

class Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound,         // key (or file) does not exist
    kInvalidArgument,  // bad input: unknown class, oversized value, bad option...
    kIOError,          // the OS refused (missing directory, permissions, ...)
    kCorruption,       // pool file damaged or not an nvmw pool
    kNoSpace,          // pool full; the store is unchanged
    kOverloaded,       // bounded queue full; request was not accepted
    kShutdown,         // middleware stopped or not started
    kNotSupported,
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg = {}) { return Status(Code::kNotFound, msg); }
  static Status InvalidArgument(std::string_view msg) { return Status(Code::kInvalidArgument, msg); }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Overloaded(std::string_view msg = {}) { return Status(Code::kOverloaded, msg); }
  static Status Shutdown(std::string_view msg = {}) { return Status(Code::kShutdown, msg); }
  static Status NotSupported(std::string_view msg) { return Status(Code::kNotSupported, msg); }

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsOverloaded() const { return code_ == Code::kOverloaded; }
  bool IsShutdown() const { return code_ == Code::kShutdown; }

  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "OK", or "<CodeName>: <message>".
  std::string ToString() const;
  static const char* CodeName(Code code);

 private:
  Status(Code code, std::string_view msg) : code_(code), msg_(msg) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

}  // namespace nvmw

#endif  // NVMW_STATUS_H_
