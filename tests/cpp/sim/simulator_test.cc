// Simulator tests: processor sharing, then whole-system behaviour on hand-computable
// configurations (jitter 0 unless a test is about randomness).
#include "nvmw/sim.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "device/device_test_util.h"
#include "sim/ps_resource.h"
#include "sim/rr_cpu.h"

namespace nvmw {
namespace {

using sim::PsResource;

PsResource OneCore() {
  return PsResource(1, [](int, int n0, int) { return n0 <= 1 ? 1.0 : 1.0 / n0; });
}

TEST(PsResourceTest, SingleJobTakesItsWork) {
  PsResource ps = OneCore();
  ps.Add(0, 0, 100, 7);
  EXPECT_DOUBLE_EQ(ps.NextDeparture(), 100);
  EXPECT_EQ(ps.PopNext(100), 7u);
  EXPECT_EQ(ps.active(), 0);
}

TEST(PsResourceTest, LateArrivalSharesTheRest) {
  // A (100) at 0, B (100) at 50: A has 50 left at half speed -> leaves at 150;
  // B then has 50 left at full speed -> 200.
  PsResource ps = OneCore();
  ps.Add(0, 0, 100, 1);
  ps.Add(50, 0, 100, 2);
  EXPECT_DOUBLE_EQ(ps.NextDeparture(), 150);
  EXPECT_EQ(ps.PopNext(150), 1u);
  EXPECT_DOUBLE_EQ(ps.NextDeparture(), 200);
  EXPECT_EQ(ps.PopNext(200), 2u);
}

TEST(PsResourceTest, TwoKindsWithCoupledRates) {
  // Kind 1 runs at 1/(n0+n1), kind 0 at 2/(n0+n1).
  PsResource ps(2, [](int kind, int n0, int n1) { return (kind == 0 ? 2.0 : 1.0) / (n0 + n1); });
  ps.Add(0, 0, 100, 10);  // alone: rate 2 -> would leave at 50
  ps.Add(0, 1, 100, 11);  // now rates 1 and 0.5
  EXPECT_DOUBLE_EQ(ps.NextDeparture(), 100);
  EXPECT_EQ(ps.PopNext(100), 10u);  // kind 1 has done 50, runs at 1 now -> 150
  EXPECT_DOUBLE_EQ(ps.NextDeparture(), 150);
}

TEST(RoundRobinCpuTest, QuantumInterleavesJobs) {
  // One core, quantum 10: A (30) and B (10) at 0 -> A 0-10, B 10-20 (done), A 20-40 (done).
  sim::RoundRobinCpu cpu(1, 10, 1.0);
  cpu.Add(0, 30, 1);
  cpu.Add(0, 10, 2);
  uint64_t done = 0;
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 10);
  EXPECT_FALSE(cpu.Step(10, &done));  // A preempted
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 20);
  EXPECT_TRUE(cpu.Step(20, &done));
  EXPECT_EQ(done, 2u);
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 30);
  EXPECT_FALSE(cpu.Step(30, &done));  // A alone: slices go on
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 40);
  EXPECT_TRUE(cpu.Step(40, &done));
  EXPECT_EQ(done, 1u);
  EXPECT_EQ(cpu.running(), 0);
}

TEST(RoundRobinCpuTest, CoresRunInParallelAndSpeedScales) {
  sim::RoundRobinCpu cpu(2, 1000, 0.5);  // half the host is taken by something else
  cpu.Add(0, 100, 1);
  cpu.Add(0, 100, 2);
  cpu.Add(0, 100, 3);  // waits for a core
  EXPECT_EQ(cpu.running(), 2);
  EXPECT_EQ(cpu.queued(), 1u);
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 200);
  uint64_t done = 0;
  EXPECT_TRUE(cpu.Step(200, &done));
  EXPECT_TRUE(cpu.Step(200, &done));
  EXPECT_DOUBLE_EQ(cpu.NextEvent(), 400);
}

SimParams Exact() {
  SimParams p;
  p.cores = 2;
  p.background = 0;
  p.client_cpu_us = 0;
  p.wake_cpu_us = 0;
  p.op_cpu_us = 10;
  p.copy_bytes_per_ns = 10;
  p.jitter = 0;
  return p;
}

// `n` requests evenly spaced `gap_us` apart, looped.
SimClassWorkload Paced(int n, double gap_us, uint32_t bytes, bool write, int clients) {
  SimClassWorkload w;
  for (int i = 0; i < n; i++) {
    w.times_us.push_back(i * gap_us);
    w.writes.push_back(write ? 1 : 0);
    w.bytes.push_back(bytes);
  }
  w.period_us = n * gap_us;
  w.clients = clients;
  return w;
}

std::unique_ptr<Simulator> Make(const SimOptions& o) {
  std::unique_ptr<Simulator> s;
  Status st = Simulator::Create(o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

TEST(SimulatorTest, LightLoadLatencyIsTheServiceTime) {
  SimOptions o;
  o.execution = Execution::kHandOff;  // every request pays the worker's wake-up
  o.params = Exact();
  o.params.wake_cpu_us = 5;
  o.interactive_threads = 2;
  o.batch_threads = 1;
  o.window_s = 0.1;
  auto sim = Make(o);
  // 1 request per ms, 1000 B: wake 5 us + op 10 us + copy 0.1 us.
  ASSERT_TRUE(sim->SetWorkload(Paced(100, 1000, 1000, false, 4), Paced(1, 1e6, 10, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.seq, 1u);
  EXPECT_NEAR(w.interactive.ops_per_s, 1000, 20);
  EXPECT_NEAR(w.interactive.p50_us, 15.1, 15.1 * 0.01);
  EXPECT_NEAR(w.interactive.p99_us, 15.1, 15.1 * 0.01);
  EXPECT_DOUBLE_EQ(w.interactive.mean_block_bytes, 1000);
  EXPECT_EQ(w.interactive.threads, 2);
  EXPECT_EQ(w.batch.threads, 1);
}

TEST(SimulatorTest, OverloadedPoolRunsAtCapacityAndQueues) {
  SimOptions o;
  o.params = Exact();
  o.params.cores = 1;
  o.params.op_cpu_us = 100;  // one worker: 10k ops/s at most
  o.interactive_threads = 1;
  o.batch_threads = 1;
  o.window_s = 0.5;
  auto sim = Make(o);
  // 20k ops/s offered by 1000 clients.
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 50, 8, true, 1000), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 10000, 10000 * 0.01);
  EXPECT_GT(w.interactive.queue_len_end, 900u);  // the clients all wait
  EXPECT_DOUBLE_EQ(w.interactive.write_ratio, 1.0);
  // Two workers on one core: same capacity (processor sharing), not double.
  ASSERT_TRUE(sim->SetThreads(2, 1).ok());
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 10000, 10000 * 0.01);
}

TEST(SimulatorTest, MoreWorkersOnMoreCoresServeMore) {
  SimOptions o;
  o.params = Exact();
  o.params.cores = 4;
  o.params.op_cpu_us = 100;
  o.interactive_threads = 1;
  o.batch_threads = 1;
  o.window_s = 0.5;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 50, 8, false, 1000), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats one, four;
  ASSERT_TRUE(sim->RunWindow(&one).ok());
  ASSERT_TRUE(sim->SetThreads(4, 1).ok());
  ASSERT_TRUE(sim->RunWindow(&four).ok());  // 4 workers on 4 cores: 40k capacity > 20k offered
  EXPECT_NEAR(one.interactive.ops_per_s, 10000, 100);
  EXPECT_GT(four.interactive.ops_per_s, 19000);  // catches up on the backlog too
  int i = 0, b = 0;
  sim->GetThreads(&i, &b);
  EXPECT_EQ(i, 4);
  EXPECT_EQ(b, 1);
}

TEST(SimulatorTest, ShrinkingRetiresWorkers) {
  SimOptions o;
  o.params = Exact();
  o.params.cores = 8;
  o.params.op_cpu_us = 100;
  o.interactive_threads = 8;
  o.batch_threads = 1;
  o.window_s = 0.2;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 10, 8, false, 1000), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 80000, 800);
  ASSERT_TRUE(sim->SetThreads(2, 1).ok());
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 20000, 400);
}

TEST(SimulatorTest, NoControlBoundsInflight) {
  SimOptions o;
  o.params = Exact();
  o.params.cores = 8;
  o.params.op_cpu_us = 100;
  o.control = false;
  o.no_control_max_inflight = 2;
  o.window_s = 0.2;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 10, 8, false, 500), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 20000, 400);
  EXPECT_EQ(w.interactive.threads, 0);
}

TEST(SimulatorTest, DeviceStageFollowsTheModel) {
  DeviceProfile profile;
  Status s = LoadDeviceProfile(testing::DevicesDir(), "optane-1dimm", &profile);
  ASSERT_TRUE(s.ok()) << s.ToString();
  SimOptions o;
  o.params = Exact();
  o.params.op_cpu_us = 0;
  o.params.copy_bytes_per_ns = 1e9;  // no host cost: latency = device time
  o.device = profile;
  o.interactive_threads = 1;
  o.batch_threads = 1;
  o.window_s = 0.5;
  auto sim = Make(o);
  // One 800 KB write every 10 ms: never two at once.
  ASSERT_TRUE(sim->SetWorkload(Paced(1, 1e7, 8, false, 1), Paced(50, 10000, 800000, true, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  DeviceModel model(profile);
  const double expect_us = model.ServiceTimeNs(DeviceOp::kWrite, 800000 + 16, 0, 1) / 1000.0;
  EXPECT_GT(w.batch.ops, 40u);
  EXPECT_NEAR(w.batch.p50_us, expect_us, expect_us * 0.01);
}

TEST(SimulatorTest, RoundRobinMakesShortRequestsWaitBehindLongCopies) {
  // Batch: 20 copies of 1 MB (100 us each at 10 GB/s) at once, 20 workers; interactive:
  // one tiny request 1 us later. Processor sharing gives it a 1/21 share at once (about
  // 11 us); first-come first-served makes it wait for the copies ahead; round robin with
  // a 10 us slice lies between.
  auto p99 = [](double quantum_us) {
    SimOptions o;
    o.params = Exact();
    o.params.cores = 1;
    o.params.op_cpu_us = 0.5;
    o.params.quantum_us = quantum_us;
    o.interactive_threads = 1;
    o.batch_threads = 20;
    o.window_s = 0.01;
    auto sim = Make(o);
    SimClassWorkload b;
    for (int k = 0; k < 20; k++) {
      b.times_us.push_back(0);
      b.writes.push_back(1);
      b.bytes.push_back(1000000);
    }
    b.clients = 20;
    EXPECT_TRUE(sim->SetWorkload(Paced(1, 1e6, 8, false, 1), b, 0).ok());
    SimClassWorkload i = Paced(1, 1e6, 8, false, 1);
    i.times_us = {1.0};
    EXPECT_TRUE(sim->SetWorkload(i, b, 0).ok());
    WindowStats w;
    EXPECT_TRUE(sim->RunWindow(&w).ok());
    EXPECT_EQ(w.interactive.ops, 1u);
    return w.interactive.p99_us;
  };
  const double ps = p99(0), fcfs = p99(1e6), rr = p99(10);
  EXPECT_LT(ps, 20);
  EXPECT_GT(fcfs, 1500);  // behind ~19 of the 100 us copies on one core
  EXPECT_GT(rr, ps);
  EXPECT_LT(rr, fcfs);
}

TEST(SimulatorTest, SameSeedSameRunOtherSeedOtherRun) {
  auto run = [](uint64_t seed) {
    SimOptions o;
    o.params = Exact();
    o.params.jitter = 0.5;
    o.params.wake_cpu_us = 20;
    o.interactive_threads = 3;
    o.batch_threads = 2;
    o.window_s = 0.05;
    o.seed = seed;
    auto sim = Make(o);
    EXPECT_TRUE(sim->SetWorkload(Paced(500, 100, 40, false, 50), Paced(100, 500, 80000, true, 20), 1234).ok());
    std::vector<double> out;
    for (int k = 0; k < 3; k++) {
      WindowStats w;
      EXPECT_TRUE(sim->RunWindow(&w).ok());
      out.push_back(w.interactive.p99_us);
      out.push_back(w.batch.mean_us);
    }
    return out;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST(SimulatorTest, PhaseSwitchReplacesTheWorkload) {
  SimOptions o;
  o.params = Exact();
  o.window_s = 0.2;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(100, 1000, 40, false, 10), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 1000, 20);
  ASSERT_TRUE(sim->SetWorkload(Paced(100, 250, 40, false, 10), Paced(1, 1e7, 8, false, 1)).ok());
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 4000, 40);
}

// ---- caller-runs: thread counts are permits -------------------------------------------

// `per_period` requests at offset 0 of each `gap_us` period, `n` periods.
SimClassWorkload Bursts(int n, int per_period, double gap_us, int clients, bool async) {
  SimClassWorkload w;
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < per_period; k++) {
      w.times_us.push_back(i * gap_us);
      w.writes.push_back(0);
      w.bytes.push_back(0);
    }
  }
  w.period_us = n * gap_us;
  w.clients = clients;
  w.async = async;
  return w;
}

SimOptions PermitOptions(Execution e, int interactive_limit) {
  SimOptions o;
  o.execution = e;
  o.params = Exact();
  o.params.wake_cpu_us = 5;  // op 10 us, no copy cost (0-byte values), no client cost
  o.interactive_threads = interactive_limit;
  o.batch_threads = 1;
  o.window_s = 0.1;           // 100 periods of 1 ms
  return o;
}

// The other class, out of the way: one request per 10 s, at 5 s.
SimClassWorkload Idle() {
  SimClassWorkload w = Paced(1, 1e7, 0, false, 1);
  w.times_us = {5e6};
  return w;
}

TEST(SimulatorCallerRunsTest, LightLoadLatencyIsTheServiceTime) {
  // Same load as the hand-off test above: the request finds a free permit and runs on its
  // client's thread, so it pays no wake-up: op 10 us + copy 0.1 us.
  SimOptions o = PermitOptions(Execution::kCallerRuns, 2);
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(100, 1000, 1000, false, 4), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 1000, 20);
  EXPECT_NEAR(w.interactive.p50_us, 10.1, 10.1 * 0.01);
  EXPECT_NEAR(w.interactive.p99_us, 10.1, 10.1 * 0.01);
  EXPECT_EQ(w.interactive.threads, 2);
}

TEST(SimulatorCallerRunsTest, AWaiterOfAReplacedWorkloadIsServedAtItsOwnSize) {
  // One permit, two 1 MB reads due at 0: the first is served at once (op 10 us + copy
  // 100 us), the second waits for its permit. The workload is replaced (by one of 0-byte
  // requests) while it waits; granted at 110 us it wakes (5 us) and still costs its own
  // 110 us, done at 225 us.
  SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
  o.window_s = 50e-6;
  auto sim = Make(o);
  SimClassWorkload big = Paced(1, 1e7, 1000000, false, 2);
  big.times_us = {0, 0};
  big.writes = {0, 0};
  big.bytes = {1000000, 1000000};
  ASSERT_TRUE(sim->SetWorkload(big, Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());  // [0, 50) us
  EXPECT_EQ(w.interactive.ops, 0u);
  EXPECT_EQ(w.interactive.queue_len_end, 1u);
  ASSERT_TRUE(sim->SetWorkload(Idle(), Idle()).ok());
  // Windows 1-5 cover [50, 300) us. Both requests were issued at 0, so a completion's
  // latency is its time.
  std::vector<std::pair<int, double>> done;  // (window, p99 of its one completion)
  for (int k = 1; k <= 5; k++) {
    ASSERT_TRUE(sim->RunWindow(&w).ok());
    if (w.interactive.ops > 0) {
      EXPECT_EQ(w.interactive.ops, 1u);
      done.emplace_back(k, w.interactive.p99_us);
    }
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].first, 2);  // [100, 150)
  EXPECT_NEAR(done[0].second, 110, 0.5);
  EXPECT_EQ(done[1].first, 4);  // [200, 250)
  EXPECT_NEAR(done[1].second, 225, 0.5);
}

TEST(SimulatorCallerRunsTest, OneClientLimitOneNeverPaysAWakeUp) {
  auto sim = Make(PermitOptions(Execution::kCallerRuns, 1));
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 1, 1000, 1, false), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.interactive.ops, 100u);
  EXPECT_DOUBLE_EQ(w.interactive.mean_us, 10.0);
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 10.0);
}

TEST(SimulatorCallerRunsTest, SecondClientWaitsInOrderAndPaysOneHandOff) {
  // Two requests at once, one permit: the first runs at once (0-10 us); the second waits
  // in the FIFO, is handed the permit at 10, wakes (5 us) and runs (10 us): done at 25.
  auto sim = Make(PermitOptions(Execution::kCallerRuns, 1));
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 2, false), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.interactive.ops, 200u);
  EXPECT_DOUBLE_EQ(w.interactive.mean_us, (10.0 + 25.0) / 2);
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 25.0);
  // The next burst arrives at the window's last instant: one runs, one waits.
  EXPECT_EQ(w.interactive.queue_len_end, 1u);
}

TEST(SimulatorCallerRunsTest, HandOffPaysTheWorkerWakeUpInstead) {
  // The same two requests with one worker: the worker wakes for the first (5 us) and runs
  // it (5-15); it takes the second from the queue without parking (15-25).
  auto sim = Make(PermitOptions(Execution::kHandOff, 1));
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 2, false), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.interactive.ops, 200u);
  EXPECT_DOUBLE_EQ(w.interactive.mean_us, (15.0 + 25.0) / 2);
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 25.0);
}

TEST(SimulatorCallerRunsTest, AsyncRequestsRunOnWorkersHoldingThePermits) {
  // One async client submits two requests at once, one permit: a worker wakes for the
  // first (5 us) and runs it (5-15); finishing, it is handed the permit for the second
  // and runs it without parking (15-25).
  auto sim = Make(PermitOptions(Execution::kCallerRuns, 1));
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 1, true), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.interactive.ops, 200u);
  EXPECT_DOUBLE_EQ(w.interactive.mean_us, (15.0 + 25.0) / 2);
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 25.0);
}

TEST(SimulatorCallerRunsTest, ClassesHaveSeparatePermits) {
  // One interactive and one batch request at once, limit 1 each: neither waits.
  auto sim = Make(PermitOptions(Execution::kCallerRuns, 1));
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 1, 1000, 1, false), Bursts(100, 1, 1000, 1, false)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 10.0);
  EXPECT_DOUBLE_EQ(w.batch.max_us, 10.0);
}

TEST(SimulatorCallerRunsTest, LimitBoundsConcurrencyAndGrowingAdmitsWaiters) {
  // 8 cores, op 100 us, 1000 clients offering 100k ops/s: the limit is the capacity
  // (limit / 100 us), and the queue holds the waiting clients.
  SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
  o.params.cores = 8;
  o.params.op_cpu_us = 100;
  o.params.wake_cpu_us = 0;
  o.window_s = 0.2;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 10, 8, false, 1000), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 10000, 100);
  EXPECT_GT(w.interactive.queue_len_end, 900u);
  ASSERT_TRUE(sim->SetThreads(8, 1).ok());
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 80000, 800);
  ASSERT_TRUE(sim->SetThreads(2, 1).ok());  // shrinking: as permits come back
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_NEAR(w.interactive.ops_per_s, 20000, 400);
}

TEST(SimulatorCallerRunsTest, SpinningWaiterHandedItsPermitSkipsTheWakeUp) {
  // Two requests at once, one permit, 2 cores. The second waits and, a core being free,
  // spins. Spinning 20 us, it is handed the permit at 10 while still spinning and runs at
  // once (10-20). Spinning only 5 us, it has parked by then and pays the wake-up (15-25).
  auto mean_max = [](double spin_us, double cores) {
    SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
    o.params.spin_us = spin_us;
    o.params.cores = cores;
    auto sim = Make(o);
    EXPECT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 2, false), Idle()).ok());
    WindowStats w;
    EXPECT_TRUE(sim->RunWindow(&w).ok());
    EXPECT_EQ(w.interactive.ops, 200u);
    return std::make_pair(w.interactive.mean_us, w.interactive.max_us);
  };
  EXPECT_EQ(mean_max(20, 2), std::make_pair((10.0 + 20.0) / 2, 20.0));
  EXPECT_EQ(mean_max(5, 2), std::make_pair((10.0 + 25.0) / 2, 25.0));
  // One core, busy with the first request: no free core, so the waiter parks at once.
  EXPECT_EQ(mean_max(20, 1), std::make_pair((10.0 + 25.0) / 2, 25.0));
}

TEST(SimulatorCallerRunsTest, OnlyWaitersThatFindAFreeCoreSpin) {
  // Three requests at once, one permit, 2 cores, spin 100 us. The first runs (0-10); the
  // second spins (the two jobs fill both cores); the third finds no free core and parks.
  // At 10 the spinner takes the permit without a wake-up (10-20); at 20 the third is
  // handed it, wakes (5) and runs: done at 35.
  SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
  o.params.spin_us = 100;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 3, 1000, 3, false), Idle()).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_EQ(w.interactive.ops, 300u);
  EXPECT_NEAR(w.interactive.mean_us, (10.0 + 20.0 + 35.0) / 3, 1e-9);
  EXPECT_DOUBLE_EQ(w.interactive.max_us, 35.0);
}

TEST(SimulatorCallerRunsTest, SpinningBurnsACore) {
  // Two cores, processor sharing. The first interactive request runs (0-10) and the second
  // spins on the other core. A batch request issued at 1 us makes three runnable jobs on
  // two cores (each at 2/3 speed): the first interactive one, with 9 us left, ends at
  // 1 + 9 * 3/2 = 14.5, when the spinner takes the permit (its spin job goes away); the
  // batch one has 1 us left and, two jobs on two cores, ends at 15.5: latency 14.5 us.
  // The second interactive request runs 14.5-24.5. Without spinning the batch request
  // would share nothing and take its 10 us.
  auto run = [](double spin_us) {
    SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
    o.params.spin_us = spin_us;
    auto sim = Make(o);
    SimClassWorkload b = Bursts(100, 1, 1000, 1, false);
    for (double& t : b.times_us) t += 1;
    EXPECT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 2, false), b).ok());
    WindowStats w;
    EXPECT_TRUE(sim->RunWindow(&w).ok());
    return w;
  };
  const WindowStats spin = run(1000), park = run(0);
  EXPECT_NEAR(spin.batch.max_us, 14.5, 0.002);
  EXPECT_NEAR(spin.interactive.max_us, 24.5, 0.002);
  EXPECT_NEAR(park.batch.max_us, 10.0, 0.002);
  EXPECT_NEAR(park.interactive.max_us, 25.0, 0.002);
}

TEST(SimulatorCallerRunsTest, NoControlIsTheSameInBothExecutions) {
  auto run = [](Execution e) {
    SimOptions o = PermitOptions(e, 1);
    o.control = false;
    o.no_control_max_inflight = 1;
    o.params.jitter = 0.5;
    auto sim = Make(o);
    EXPECT_TRUE(sim->SetWorkload(Bursts(100, 2, 1000, 2, false), Bursts(100, 1, 1000, 1, false)).ok());
    WindowStats w;
    EXPECT_TRUE(sim->RunWindow(&w).ok());
    return std::vector<double>{w.interactive.mean_us, w.interactive.max_us, w.batch.mean_us};
  };
  EXPECT_EQ(run(Execution::kCallerRuns), run(Execution::kHandOff));
}

TEST(SimulatorCallerRunsTest, NoControlSharesOneBoundAcrossClasses) {
  // no_control_max_inflight 1: an interactive and a batch request at once share the one
  // slot: one runs (0-10), the other waits, wakes (5) and runs: done at 25.
  SimOptions o = PermitOptions(Execution::kCallerRuns, 1);
  o.control = false;
  o.no_control_max_inflight = 1;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Bursts(100, 1, 1000, 1, false), Bursts(100, 1, 1000, 1, false)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  EXPECT_DOUBLE_EQ(w.all.mean_us, (10.0 + 25.0) / 2);
  EXPECT_DOUBLE_EQ(w.all.max_us, 25.0);
  EXPECT_EQ(w.interactive.threads, 0);
}

TEST(SimulatorTest, BadInputIsRefused) {
  std::unique_ptr<Simulator> sim;
  SimOptions o;
  o.params = Exact();
  o.interactive_threads = 0;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.interactive_threads = 1;
  o.params.cores = 0;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.params = Exact();
  o.params.background = 1;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.params = Exact();
  o.window_s = 0;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.window_s = 1e300;  // the virtual clock overflowed and the next window never ended
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.window_s = 86400.5;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.window_s = 0.1;
  o.execution = static_cast<Execution>(7);
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.execution = Execution::kCallerRuns;
  o.params.spin_us = -1;
  EXPECT_TRUE(Simulator::Create(o, &sim).IsInvalidArgument());
  o.params.spin_us = 0;
  ASSERT_TRUE(Simulator::Create(o, &sim).ok());
  SimClassWorkload bad = Paced(3, 10, 8, false, 1);
  bad.times_us = {0, 20, 10};
  EXPECT_TRUE(sim->SetWorkload(bad, Paced(1, 10, 8, false, 1)).IsInvalidArgument());
  bad = Paced(3, 10, 8, false, 1);
  bad.bytes.pop_back();
  EXPECT_TRUE(sim->SetWorkload(bad, Paced(1, 10, 8, false, 1)).IsInvalidArgument());
  bad = Paced(3, 10, 8, false, 1);
  bad.period_us = 15;  // not after the last time (20)
  EXPECT_TRUE(sim->SetWorkload(bad, Paced(1, 10, 8, false, 1)).IsInvalidArgument());
  EXPECT_TRUE(sim->SetThreads(33, 1).IsInvalidArgument());
  EXPECT_TRUE(sim->RunWindow(nullptr).IsInvalidArgument());
}

TEST(SimulatorTest, JitterIsLogNormal) {
  // One request at a time, 100 us of CPU times a log-normal factor of sigma 0.5: median
  // 100 us, mean 100 exp(0.125) = 113.3 us, p99 100 exp(0.5 x 2.326) = 320 us.
  SimOptions o;
  o.params = Exact();
  o.params.op_cpu_us = 100;
  o.params.copy_bytes_per_ns = 1e6;
  o.params.jitter = 0.5;
  o.interactive_threads = 1;
  o.batch_threads = 1;
  o.window_s = 20;
  auto sim = Make(o);
  ASSERT_TRUE(sim->SetWorkload(Paced(1000, 1000, 8, false, 1), Paced(1, 1e7, 8, false, 1)).ok());
  WindowStats w;
  ASSERT_TRUE(sim->RunWindow(&w).ok());
  ASSERT_GT(w.interactive.ops, 19000u);
  EXPECT_NEAR(w.interactive.p50_us, 100, 2);
  EXPECT_NEAR(w.interactive.mean_us, 113.3, 113.3 * 0.015);
  EXPECT_NEAR(w.interactive.p99_us, 320, 320 * 0.04);
  EXPECT_GT(w.interactive.max_us, 600);  // the tail is not cut at the table's end
}

// ---- fast-forward ------------------------------------------------------------------

SimOptions FastForwardOptions(bool on) {
  SimOptions o;
  o.params = Exact();
  o.params.jitter = 0.5;  // a latency distribution with a tail
  o.interactive_threads = 4;
  o.batch_threads = 2;
  o.window_s = 1.0;
  o.fast_forward = on;
  o.seed = 3;
  return o;
}

TEST(SimulatorFastForwardTest, SteadyWindowsMatchTheExactModeAndSkipMostOfTheWindow) {
  auto exact = Make(FastForwardOptions(false));
  auto fast = Make(FastForwardOptions(true));
  // 10k interactive ops/s of 100 B, 1k batch ops/s of 64 KB: steady, far from capacity.
  for (Simulator* s : {exact.get(), fast.get()}) {
    ASSERT_TRUE(s->SetWorkload(Paced(1000, 100, 100, false, 50), Paced(100, 1000, 65536, true, 20)).ok());
  }
  WindowStats e, f;
  for (int k = 0; k < 3; k++) {
    ASSERT_TRUE(exact->RunWindow(&e).ok());
    ASSERT_TRUE(fast->RunWindow(&f).ok());
  }
  EXPECT_DOUBLE_EQ(exact->virtual_s(), 3.0);
  EXPECT_DOUBLE_EQ(fast->now_s(), 3.0);
  EXPECT_LT(fast->virtual_s(), 1.0);  // most of each window was extrapolated
  EXPECT_EQ(f.seq, 3u);
  EXPECT_DOUBLE_EQ(f.start_s, 2.0);
  // The schedule offers exactly 10k and 1k ops/s; the skipped stretches count what they offer.
  EXPECT_NEAR(f.interactive.ops_per_s, e.interactive.ops_per_s, 20);
  EXPECT_NEAR(f.batch.ops_per_s, e.batch.ops_per_s, 5);
  EXPECT_NEAR(f.batch.bytes_per_s, e.batch.bytes_per_s, e.batch.bytes_per_s * 0.01);
  EXPECT_DOUBLE_EQ(f.batch.write_ratio, 1.0);
  EXPECT_NEAR(f.interactive.p50_us, e.interactive.p50_us, e.interactive.p50_us * 0.1);
  EXPECT_NEAR(f.interactive.p99_us, e.interactive.p99_us, e.interactive.p99_us * 0.25);
}

TEST(SimulatorFastForwardTest, SaturatedClassRunsAtItsRateAndKeepsItsBacklog) {
  // One core, 100 us per op: 10k ops/s at most, 20k offered by 1000 clients.
  SimOptions o = FastForwardOptions(true);
  o.params.cores = 1;
  o.params.jitter = 0;
  o.params.op_cpu_us = 100;
  o.interactive_threads = 1;
  o.batch_threads = 1;
  o.window_s = 0.5;
  auto fast = Make(o);
  o.fast_forward = false;
  auto exact = Make(o);
  for (Simulator* s : {exact.get(), fast.get()}) {
    ASSERT_TRUE(s->SetWorkload(Paced(1000, 50, 8, true, 1000), Paced(1, 1e7, 8, false, 1)).ok());
  }
  WindowStats e, f;
  for (int k = 0; k < 4; k++) {
    ASSERT_TRUE(exact->RunWindow(&e).ok());
    ASSERT_TRUE(fast->RunWindow(&f).ok());
  }
  EXPECT_LT(fast->virtual_s(), 1.5);
  EXPECT_NEAR(f.interactive.ops_per_s, 10000, 100);
  EXPECT_EQ(f.interactive.queue_len_end, e.interactive.queue_len_end);  // every client waits
  // Both have built the same backlog (10k due per second beyond what is served): with
  // 4 permits on 4 cores it is worked off at 40k ops/s in both.
  o.params.cores = 4;
  for (Simulator* s : {exact.get(), fast.get()}) ASSERT_TRUE(s->SetThreads(4, 1).ok());
  ASSERT_TRUE(exact->RunWindow(&e).ok());
  ASSERT_TRUE(fast->RunWindow(&f).ok());
  EXPECT_NEAR(f.interactive.ops_per_s, e.interactive.ops_per_s, e.interactive.ops_per_s * 0.02);
}

TEST(SimulatorFastForwardTest, ARampIsSimulatedNotExtrapolated) {
  // 200 clients, 100 ops/s each offered against 1 permit of 1 ms: the permit FIFO fills
  // for about 200 ms. A window that starts with that ramp must simulate through it.
  SimOptions o = FastForwardOptions(true);
  o.params.jitter = 0;
  o.params.op_cpu_us = 1000;
  o.interactive_threads = 1;
  o.window_s = 0.4;
  auto fast = Make(o);
  o.fast_forward = false;
  auto exact = Make(o);
  for (Simulator* s : {exact.get(), fast.get()}) {
    ASSERT_TRUE(s->SetWorkload(Paced(2000, 50, 8, false, 200), Paced(1, 1e7, 8, false, 1)).ok());
  }
  WindowStats e, f;
  ASSERT_TRUE(exact->RunWindow(&e).ok());
  ASSERT_TRUE(fast->RunWindow(&f).ok());
  EXPECT_GT(fast->virtual_s(), 0.2);
  EXPECT_EQ(f.interactive.queue_len_end, e.interactive.queue_len_end);
  EXPECT_NEAR(f.interactive.ops_per_s, e.interactive.ops_per_s, e.interactive.ops_per_s * 0.02);
}

TEST(SimulatorFastForwardTest, BadOptionsAreRefused) {
  SimOptions o = FastForwardOptions(true);
  std::unique_ptr<Simulator> s;
  o.ff_chunk_s = 0;
  EXPECT_FALSE(Simulator::Create(o, &s).ok());
  o = FastForwardOptions(true);
  o.ff_min_ops = 0;
  EXPECT_FALSE(Simulator::Create(o, &s).ok());
  o = FastForwardOptions(true);
  o.ff_tolerance = -1;
  EXPECT_FALSE(Simulator::Create(o, &s).ok());
}

}  // namespace
}  // namespace nvmw
