// MemoryEngine: a sharded in-DRAM hash map behind the Engine interface. Used by
// tests and as the DRAM baseline; it keeps nothing across restarts.
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/engine_util.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

using engine_internal::CheckKey;
using engine_internal::CheckValue;
using engine_internal::HashKey;

// Transparent hash/equality so lookups take a string_view without building a
// std::string for every Get.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view k) const { return HashKey(k); }
  size_t operator()(const std::string& k) const { return HashKey(k); }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

class MemoryEngine final : public Engine {
 public:
  explicit MemoryEngine(const MemoryOptions& options)
      : options_(options), shards_(options.shards == 0 ? 1 : options.shards) {}

  Status Get(std::string_view key, const ValueFn& fn) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    Shard& shard = ShardFor(h);
    std::shared_lock lock(shard.mu);
    auto it = shard.map.find(key);
    if (it == shard.map.end()) return Status::NotFound();
    fn(it->second);
    return Status::OK();
  }

  Status Put(std::string_view key, std::string_view value) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    s = CheckValue(value, options_.max_value_bytes);
    if (!s.ok()) return s;
    uint64_t h = HashKey(key);
    Shard& shard = ShardFor(h);
    // Copy the value before taking the lock so a large value does not hold
    // the stripe for the duration of its memcpy; the swap under the lock is
    // what makes the replacement atomic for readers.
    std::string copy(value);
    std::unique_lock lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      it->second.swap(copy);
      lock.unlock();  // the old value is freed outside the lock
      return Status::OK();
    }
    shard.map.emplace(std::string(key), std::move(copy));
    count_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Remove(std::string_view key) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    Shard& shard = ShardFor(HashKey(key));
    std::string old;
    std::unique_lock lock(shard.mu);
    auto it = shard.map.find(key);
    if (it == shard.map.end()) return Status::NotFound();
    old.swap(it->second);
    shard.map.erase(it);
    count_.fetch_sub(1, std::memory_order_relaxed);
    return Status::OK();
  }

  Status Exists(std::string_view key) override {
    Status s = CheckKey(key, options_.max_key_bytes);
    if (!s.ok()) return s;
    Shard& shard = ShardFor(HashKey(key));
    std::shared_lock lock(shard.mu);
    return shard.map.find(key) != shard.map.end() ? Status::OK() : Status::NotFound();
  }

  uint64_t Count() override { return count_.load(std::memory_order_relaxed); }

  const char* Name() const override { return "memory"; }

 private:
  // Each stripe on its own cache line so writers on different stripes do not
  // bounce one line between cores.
  struct alignas(64) Shard {
    std::shared_mutex mu;
    std::unordered_map<std::string, std::string, KeyHash, KeyEq> map;
  };

  Shard& ShardFor(uint64_t h) { return shards_[(h >> 40) % shards_.size()]; }

  const MemoryOptions options_;
  std::vector<Shard> shards_;
  std::atomic<uint64_t> count_{0};
};

}  // namespace

std::unique_ptr<Engine> NewMemoryEngine(const MemoryOptions& options) {
  return std::make_unique<MemoryEngine>(options);
}

}  // namespace nvmw
