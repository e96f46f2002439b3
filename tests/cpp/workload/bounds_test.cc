// Bounds of the workload layer: the trace reader's size cap (TraceReadOptions::max_bytes)
// and its treatment of rows that are not UTF-8, the replay's size cap
// (ReplayOptions::max_value_bytes and the middleware's max_value_bytes), checked before
// any value buffer is allocated, the YCSB generator's option checks, and the cancel
// flags of trace synthesis and reading. Each refusal
// names what was wrong (the line, the record, the option).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/replay.h"
#include "nvmw/trace.h"
#include "nvmw/ycsb.h"

namespace nvmw {
namespace {

const char kNativeHeader[] = "time_ms,op,key,bytes\n";
const char kAzureHeader[] =
    "Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,"
    "BlobType,AnonBlobETag,BlobBytes,Read,Write\n";

std::string AzureRow(int64_t ts, const std::string& blob, const std::string& bytes, bool write) {
  return std::to_string(ts) + ",r,1,app,2," + blob + ",BlockBlob,etag," + bytes + "," +
         (write ? "False,True" : "True,False") + "\n";
}

TraceReadOptions Native(uint64_t max_bytes, bool skip) {
  TraceReadOptions o;
  o.format = TraceFormat::kNative;
  o.max_bytes = max_bytes;
  o.skip_malformed = skip;
  o.source_name = "t.csv";
  return o;
}

TEST(TraceBoundsTest, NativeRowOverTheSizeCapIsMalformedWithItsLine) {
  const std::string text = std::string(kNativeHeader) + "0,W,a,100\n1,W,b,4096\n2,R,c,4097\n";
  Trace t;
  Status s = ParseTrace(text, Native(4096, false), &t);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("t.csv:4:"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("exceeds the size cap 4096"), std::string::npos) << s.ToString();

  ASSERT_TRUE(ParseTrace(text, Native(4096, true), &t).ok());
  EXPECT_EQ(t.records.size(), 2u);  // the row at the cap is kept
  EXPECT_EQ(t.skipped_rows, 1u);
  EXPECT_NE(t.first_skip_reason.find("t.csv:4:"), std::string::npos);

  ASSERT_TRUE(ParseTrace(text, Native(0, false), &t).ok());  // 0: no cap
  EXPECT_EQ(t.records.size(), 3u);
}

TEST(TraceBoundsTest, AzureRowOverTheSizeCapIsMalformedWithItsLine) {
  const std::string text = std::string(kAzureHeader) + AzureRow(1000, "a", "10.0", true) +
                           AzureRow(1001, "b", "900000000000000.0", false);
  TraceReadOptions o;
  o.max_bytes = 1 << 20;
  o.source_name = "az.csv";
  Trace t;
  Status s = ParseTrace(text, o, &t);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("az.csv:3:"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("exceeds the size cap"), std::string::npos) << s.ToString();
}

TEST(TraceBoundsTest, RowThatIsNotUtf8IsMalformedWithItsLineAndColumn) {
  // A valid two-byte character (é) is text; 0xFF, a lone continuation byte, an overlong
  // '/' and a UTF-16 surrogate are not.
  const std::string good = "1,W,caf\xC3\xA9,10\n";
  for (const std::string bad : {std::string("2,W,k\xFF,10\n"), std::string("2,W,k\x80,10\n"),
                                std::string("2,W,k\xC0\xAF,10\n"), std::string("2,W,k\xED\xA0\x80,10\n")}) {
    const std::string text = std::string(kNativeHeader) + good + bad + "3,R,x,5\n";
    Trace t;
    Status s = ParseTrace(text, Native(0, false), &t);
    ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.ToString().find("t.csv:3: not UTF-8 text (byte 0x"), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("at column 6)"), std::string::npos) << s.ToString();
    // The message itself is text: no byte of the row is quoted.
    EXPECT_EQ(s.ToString().find(bad.substr(5, 1)), std::string::npos);

    ASSERT_TRUE(ParseTrace(text, Native(0, true), &t).ok());
    ASSERT_EQ(t.records.size(), 2u);
    EXPECT_EQ(t.records[0].key, "caf\xC3\xA9");
    EXPECT_EQ(t.skipped_rows, 1u);
    EXPECT_NE(t.first_skip_reason.find("t.csv:3: not UTF-8"), std::string::npos);
  }
}

TEST(TraceBoundsTest, AzureRowThatIsNotUtf8IsSkippedAndCounted) {
  const std::string text = std::string(kAzureHeader) + AzureRow(1000, "a", "10.0", true) +
                           AzureRow(1001, "b\xFE", "10.0", false) + AzureRow(1002, "c", "10.0", false);
  TraceReadOptions o;
  o.skip_malformed = true;
  o.source_name = "az.csv";
  Trace t;
  ASSERT_TRUE(ParseTrace(text, o, &t).ok());
  EXPECT_EQ(t.records.size(), 2u);
  EXPECT_EQ(t.skipped_rows, 1u);
  EXPECT_NE(t.first_skip_reason.find("az.csv:3: not UTF-8 text (byte 0xFE"), std::string::npos)
      << t.first_skip_reason;
}

Trace TwoRecords(uint64_t big) {
  Trace t;
  t.records.push_back({0, TraceOp::kWrite, "small", 64});
  t.records.push_back({1000, TraceOp::kWrite, "big", big});
  return t;
}

class ReplayBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MiddlewareOptions mo;
    mo.max_value_bytes = 1 << 20;
    mw_ = std::make_shared<Middleware>(mo);
    ASSERT_TRUE(mw_->Start(engine_.get(), 2, 1).ok());
  }
  void TearDown() override { mw_->Stop(); }
  std::unique_ptr<Engine> engine_ = NewMemoryEngine();
  std::shared_ptr<Middleware> mw_;
};

TEST_F(ReplayBoundsTest, RecordOverTheOptionCapIsRefusedBeforeStarting) {
  ReplayOptions o;
  o.threads = 2;
  o.max_value_bytes = 4096;
  Replay r(TwoRecords(4097), o);
  Status s = r.Start(mw_);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("record 2 (key 'big') is 4097 bytes"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("max_value_bytes"), std::string::npos);
  EXPECT_FALSE(r.running());
  EXPECT_EQ(engine_->Count(), 0u);  // nothing was issued

  Replay at_cap(TwoRecords(4096), o);
  ReplayResult res;
  ASSERT_TRUE(at_cap.Run(mw_, &res).ok());
  EXPECT_EQ(res.all.ops, 2u);
  EXPECT_EQ(res.errors, 0u);
}

TEST_F(ReplayBoundsTest, AbsurdSizeMeetsTheMiddlewareCapNotTheAllocator) {
  ReplayOptions o;  // max_value_bytes 0: the middleware's 1 MiB applies
  o.threads = 2;
  Replay r(TwoRecords(uint64_t{1} << 60), o);
  Status s = r.Start(mw_);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();  // not std::bad_alloc
  EXPECT_NE(s.ToString().find("over the size cap 1048576"), std::string::npos) << s.ToString();

  o.max_value_bytes = uint64_t{1} << 40;  // a looser option cap cannot lift the middleware's
  Replay looser(TwoRecords(2 << 20), o);
  EXPECT_TRUE(looser.Start(mw_).IsInvalidArgument());
}

TEST(CancelTest, SynthesisAndReadingStopWhenCancelled) {
  std::atomic<bool> cancel{true};
  AzureSynthOptions az;
  az.rows = 100000;
  az.cancel = &cancel;
  Trace t;
  EXPECT_TRUE(SynthesizeAzure(az, &t).IsShutdown());
  EXPECT_TRUE(t.records.empty());
  SvdSynthOptions svd;
  svd.cancel = &cancel;
  EXPECT_TRUE(SynthesizeSvd(svd, &t).IsShutdown());
  EXPECT_TRUE(t.records.empty());

  cancel = false;
  ASSERT_TRUE(SynthesizeAzure(az, &t).ok());  // not cancelled: the whole trace
  EXPECT_EQ(t.records.size(), 100000u);
  const std::string path = ::testing::TempDir() + "/nvmw-cancel-trace.csv";
  ASSERT_TRUE(WriteTrace(path, t, TraceFormat::kNative).ok());
  TraceReadOptions o;
  o.format = TraceFormat::kNative;
  o.cancel = &cancel;
  Trace back;
  ASSERT_TRUE(ReadTrace(path, o, &back).ok());
  EXPECT_EQ(back.records.size(), 100000u);
  cancel = true;
  Status s = ReadTrace(path, o, &back);
  EXPECT_TRUE(s.IsShutdown()) << s.ToString();
  EXPECT_NE(s.ToString().find("read stopped at line 4096"), std::string::npos) << s.ToString();
  std::remove(path.c_str());
}

YcsbOptions Valid() {
  YcsbOptions o;
  o.record_count = 10;
  o.operation_count = 100;
  o.threads = 2;
  return o;
}

TEST(YcsbBoundsTest, ValidOptionsPass) { EXPECT_TRUE(YcsbGenerator::Validate(Valid()).ok()); }

TEST(YcsbBoundsTest, EachBadOptionIsNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* field;
    void (*set)(YcsbOptions*, double);
    double value;
  };
  const Case cases[] = {
      {"threads", [](YcsbOptions* o, double) { o->threads = 0; }, 0},
      {"threads", [](YcsbOptions* o, double) { o->threads = 100001; }, 0},
      {"load_threads", [](YcsbOptions* o, double) { o->load_threads = -1; }, 0},
      {"proportion", [](YcsbOptions* o, double v) { o->read_proportion = v; }, -0.5},
      {"proportion", [](YcsbOptions* o, double v) { o->read_proportion = v; }, nan},
      {"sum to 1", [](YcsbOptions* o, double v) { o->read_proportion = v; }, 0.7},
      {"record_count", [](YcsbOptions* o, double) { o->record_count = 0; }, 0},
      {"duration_s", [](YcsbOptions* o, double v) { o->duration_s = v; }, -1},
      {"duration_s", [](YcsbOptions* o, double v) { o->duration_s = v; }, nan},
      {"duration_s", [](YcsbOptions* o, double v) { o->duration_s = v; }, inf},
      {"operation_count or duration_s", [](YcsbOptions* o, double) { o->operation_count = 0; }, 0},
      {"target_ops_per_s", [](YcsbOptions* o, double v) { o->target_ops_per_s = v; }, -5},
      {"target_ops_per_s", [](YcsbOptions* o, double v) { o->target_ops_per_s = v; }, inf},
      {"interval_s", [](YcsbOptions* o, double v) { o->interval_s = v; }, 1e-6},
      {"interval_s", [](YcsbOptions* o, double v) { o->interval_s = v; }, nan},
      {"zipfian_constant", [](YcsbOptions* o, double v) { o->zipfian_constant = v; }, 1.0},
      {"zipfian_constant", [](YcsbOptions* o, double v) { o->zipfian_constant = v; }, 0.0},
  };
  for (const Case& c : cases) {
    YcsbOptions o = Valid();
    c.set(&o, c.value);
    Status s = YcsbGenerator::Validate(o);
    EXPECT_TRUE(s.IsInvalidArgument()) << c.field << " " << c.value << ": " << s.ToString();
    EXPECT_NE(s.ToString().find(c.field), std::string::npos) << s.ToString();
    // The generator refuses the same options when asked to run, before any thread starts.
    auto engine = NewMemoryEngine();
    YcsbGenerator gen(o, engine.get());
    EXPECT_TRUE(gen.Start().IsInvalidArgument()) << c.field;
    EXPECT_FALSE(gen.running());
  }
}

}  // namespace
}  // namespace nvmw
