// BoundedQueue at every capacity, 1 included: a full queue refuses a push, and every
// item pushed comes out once, in order. With capacity 1 a push into the full queue
// succeeded and overwrote the item not yet popped (the cell's "holds the item of
// position p" read as "free for position p + 1"), and the next pop spun for ever on a
// cell a lap ahead of it: with hand-off and queue_capacity = 1 the second request
// queued behind a running one was accepted and lost, and the worker spun (Stop hung).
// The cases run in a forked child with an alarm: 142 = 128 + SIGALRM is that spin.
#include "middleware/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "test_util.h"

namespace nvmw {
namespace {

int FillAndDrain(size_t capacity) {
  BoundedQueue<int> q(capacity);
  std::vector<int> items(capacity + 1);
  for (int lap = 0; lap < 3; ++lap) {  // the cells' sequence numbers go round
    CHILD_CHECK(q.LooksEmpty());
    for (size_t i = 0; i < capacity; ++i) CHILD_CHECK(q.TryPush(&items[i]));
    CHILD_CHECK(!q.TryPush(&items[capacity]));
    CHILD_CHECK(q.SizeApprox() == capacity);
    CHILD_CHECK(!q.LooksEmpty());
    for (size_t i = 0; i < capacity; ++i) {
      int* out = nullptr;
      CHILD_CHECK(q.TryPop(&out) && out == &items[i]);
    }
    int* out = nullptr;
    CHILD_CHECK(!q.TryPop(&out));
  }
  return 0;
}

TEST(BoundedQueueTest, FullQueueRefusesAtEveryCapacity) {
  for (size_t capacity : {1, 2, 3, 8}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    EXPECT_EQ(testing::InChild([capacity] { return FillAndDrain(capacity); }, 30), 0);
  }
}

// One producer, one consumer, capacity 1: every item arrives once, in order.
int CapacityOneHandOver() {
  constexpr int kItems = 20000;
  BoundedQueue<int> q(1);
  std::vector<int> items(kItems);
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      while (!q.TryPush(&items[i])) std::this_thread::yield();
    }
  });
  int next = 0;
  bool in_order = true;
  while (next < kItems) {
    int* out = nullptr;
    if (!q.TryPop(&out)) {
      std::this_thread::yield();
      continue;
    }
    in_order = in_order && out == &items[next];
    ++next;
  }
  producer.join();
  CHILD_CHECK(in_order);
  return 0;
}

TEST(BoundedQueueTest, CapacityOneHandsOverEveryItem) {
  EXPECT_EQ(testing::InChild(CapacityOneHandOver, 30), 0);
}

// Hand-off with queue_capacity = 1: the worker runs one request, one waits in the
// queue, the next is refused, and every accepted request completes.
int HandOffQueueOfOne() {
  auto engine = NewMemoryEngine();
  MiddlewareOptions o = testing::OnePermitOptions(testing::Mode::kHandOff);
  o.queue_capacity = 1;
  Middleware mw(o);
  CHILD_CHECK(mw.Start(engine.get(), 1, 1).ok());
  std::atomic<bool> running{false}, release{false};
  std::atomic<int> completed{0};
  auto put = [](const std::string& key) {
    Request r;
    r.op = OpType::kPut;
    r.key = key;
    r.value = "v";
    r.cls = RequestClass::kInteractive;
    return r;
  };
  CHILD_CHECK(mw.Submit(put("running"), [&](const Status&, std::string&&) {
                  running.store(true);
                  testing::WaitUntil([&] { return release.load(); });
                  completed.fetch_add(1);
                }).ok());
  CHILD_CHECK(testing::WaitUntil([&] { return running.load(); }));
  CHILD_CHECK(mw.Submit(put("queued"), [&](const Status&, std::string&&) {
                  completed.fetch_add(1);
                }).ok());
  const Status refused = mw.Submit(put("refused"), [&](const Status&, std::string&&) {
    completed.fetch_add(100);
  });
  release.store(true);
  CHILD_CHECK(refused.IsOverloaded());
  CHILD_CHECK(mw.Stop().ok());
  CHILD_CHECK(completed.load() == 2);
  std::string v;
  CHILD_CHECK(engine->Get("queued", &v).ok());
  CHILD_CHECK(engine->Get("refused", &v).IsNotFound());
  return 0;
}

TEST(BoundedQueueTest, HandOffQueueOfOneRefusesTheSecondWaiter) {
  EXPECT_EQ(testing::InChild(HandOffQueueOfOne, 30), 0);
}

}  // namespace
}  // namespace nvmw
