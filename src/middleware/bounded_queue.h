// BoundedQueue: the lock-free bounded multi-producer/multi-consumer FIFO behind each
// request class (D. Vyukov's sequence-numbered ring), holding pointers to tasks.
//
// Every cell carries a sequence number that tells producers and consumers whose turn it
// is, so neither side takes a lock and a full queue is detected without blocking (the
// middleware then answers Overloaded). Any capacity works (cells are indexed modulo the
// capacity, positions are 64-bit and never wrap in practice). The sequence counts in
// half steps: the cell of position p is free for it at 2p and holds its item at 2p + 1;
// a pop frees it for position p + capacity at 2(p + capacity). With whole steps (p,
// p + 1, p + capacity), a capacity of 1 made "holds the item of p" (p + 1) read as
// "free for p + 1": a push overwrote an item not yet popped, which was lost.
//
// Thread safety: TryPush/TryPop/SizeApprox/LooksEmpty from any number of threads.
#ifndef NVMW_MIDDLEWARE_BOUNDED_QUEUE_H_
#define NVMW_MIDDLEWARE_BOUNDED_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nvmw {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity), cells_(new Cell[capacity]) {
    for (size_t i = 0; i < capacity_; ++i) cells_[i].seq.store(2 * i, std::memory_order_relaxed);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // False when the queue is full. The publishing store is seq_cst so that a producer's
  // later check of "is a consumer parked?" cannot be ordered before it (the consumer
  // side does the mirror image: announce parked, then LooksEmpty()).
  bool TryPush(T* item) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos % capacity_];
      const uint64_t seq = cell.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - 2 * pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.item = item;
          cell.seq.store(2 * pos + 1, std::memory_order_seq_cst);
          return true;
        }
      } else if (diff < 0) {
        return false;  // the cell still holds an item from one lap ago: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // False when no published item is available.
  bool TryPop(T** item) {
    uint64_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos % capacity_];
      const uint64_t seq = cell.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - (2 * pos + 1));
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *item = cell.item;
          cell.seq.store(2 * (pos + capacity_), std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // not yet published: empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // True when the cell at the current head holds no published item (seq_cst: see
  // TryPush). If a consumer moves the head meanwhile, looks again rather than answer
  // "empty" from a stale cell.
  bool LooksEmpty() const {
    for (;;) {
      const uint64_t pos = head_.load(std::memory_order_seq_cst);
      const uint64_t seq = cells_[pos % capacity_].seq.load(std::memory_order_seq_cst);
      const int64_t diff = static_cast<int64_t>(seq - (2 * pos + 1));
      if (diff == 0) return false;
      if (diff < 0) return true;
    }
  }

  // Items pushed and not yet popped (claimed-but-unpublished pushes included).
  size_t SizeApprox() const {
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    return tail > head ? static_cast<size_t>(tail - head) : 0;
  }

  size_t capacity() const { return capacity_; }

 private:
  struct Cell {
    std::atomic<uint64_t> seq{0};
    T* item = nullptr;
  };
  const size_t capacity_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<uint64_t> tail_{0};  // next position to push
  alignas(64) std::atomic<uint64_t> head_{0};  // next position to pop
};

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_BOUNDED_QUEUE_H_
