// A no-op Engine: stores nothing, answers at once. Used to measure how many
// operations a generator (alone, or through the middleware) can issue.
#include "nvmw/ycsb.h"

namespace nvmw {

namespace {

class NoopEngine final : public Engine {
 public:
  Status Get(std::string_view key, const ValueFn& fn) override {
    fn(std::string_view());
    return Status::OK();
  }
  Status Put(std::string_view key, std::string_view value) override { return Status::OK(); }
  Status Remove(std::string_view key) override { return Status::OK(); }
  Status Exists(std::string_view key) override { return Status::OK(); }
  uint64_t Count() override { return 0; }
  const char* Name() const override { return "noop"; }
};

}  // namespace

std::unique_ptr<Engine> NewNoopEngine() { return std::make_unique<NoopEngine>(); }

}  // namespace nvmw
