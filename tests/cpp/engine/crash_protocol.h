// The record the crash-test child (crash_writer_tool) sends its parent through a
// pipe for every operation it starts and every one the engine acknowledged.
#ifndef NVMW_TESTS_ENGINE_CRASH_PROTOCOL_H_
#define NVMW_TESTS_ENGINE_CRASH_PROTOCOL_H_

#include <cstdint>
#include <string>

namespace nvmw::test {

enum class CrashEvent : uint32_t {
  kBeginPut = 1,     // Put(key, MakeValue(key, version, length)) is about to run
  kBeginRemove = 2,  // Remove(key) is about to run
  kAck = 3,          // the operation announced last for this key returned OK
  kReady = 4,        // the pool is open (key = count of keys found)
  kBeginPutMany = 5, // PutMany of the `key` kBeginPut records that follow this one
                     // (sent with them in one write) is about to run
};

// 24 bytes, below PIPE_BUF, so a write(2) of one record is never interleaved
// with another thread's record and a killed child never leaves half a record.
struct CrashRecord {
  uint32_t key;  // index; the key string is CrashKey(index)
  CrashEvent event;
  uint64_t version;
  uint64_t length;
};
static_assert(sizeof(CrashRecord) == 24);

// Most items of one PutMany in the writer's "many" mode: the batch's records, one
// write of (kCrashMaxBatch + 1) * 24 bytes, stay below PIPE_BUF.
constexpr uint32_t kCrashMaxBatch = 20;

// Buckets of the writer's pool.
constexpr uint64_t kCrashBuckets = 64;

// Keys below kCrashLargeKeys get 1-4 MB values; the rest small ones.
constexpr uint32_t kCrashKeys = 48;
constexpr uint32_t kCrashLargeKeys = 6;

inline std::string CrashKey(uint32_t i) { return "crash-key-" + std::to_string(i); }

}  // namespace nvmw::test

#endif  // NVMW_TESTS_ENGINE_CRASH_PROTOCOL_H_
