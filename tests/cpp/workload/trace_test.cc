// Trace readers (Azure 2020 schema and native CSV, every documented quirk,
// malformed rows), writers (round trip), synthesis statistics, filters, transforms.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <fstream>
#include <iterator>
#include <set>
#include <map>
#include <limits>
#include <string>

#include "nvmw/trace.h"

namespace nvmw {
namespace {

constexpr const char* kHeader =
    "Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,"
    "BlobType,AnonBlobETag,BlobBytes,Read,Write\n";

TraceReadOptions Azure(bool skip = false) {
  TraceReadOptions o;
  o.format = TraceFormat::kAzure;
  o.skip_malformed = skip;
  o.source_name = "trace.csv";
  return o;
}

TraceReadOptions Native(bool skip = false) {
  TraceReadOptions o = Azure(skip);
  o.format = TraceFormat::kNative;
  return o;
}

TEST(AzureReader, ReadsEveryDocumentedQuirk) {
  // Unsorted timestamps, True/False in mixed case, an empty BlobBytes, "; " inside
  // BlobType, a bare "BlockBlob/", a 0-byte blob, CRLF line ends, trailing blank line.
  std::string text = std::string(kHeader) +
      "1606355700058,iic,1495523193,uf2u84b0,1302383289,tp783etybrgxap8x,BlockBlob/,6mreka6qhr,36.0,False,True\r\n"
      "1606092900138,6ex,775920313,9gti3olh,1565080819,jfvf7k9kwiiq7gdx,BlockBlob/application/octet-stream,kq2su6bhi0,30.0,True,False\r\n"
      "1606092900138,6ex,775920313,9gti3olh,1565080820,aaaaaaaaaaaaaaaa,BlockBlob/text/plain; charset=utf-8,kq2su6bhi1,,TRUE,false\n"
      "1606092901000,6ex,775920313,9gti3olh,1565080821,bbbbbbbbbbbbbbbb,BlockBlob/,kq2su6bhi2,0.0,false,TrUe\n"
      "1606092900500,6ex,775920313,9gti3olh,1565080822,cccccccccccccccc,BlockBlob/image/png,kq2su6bhi3,5302.6,True,False\n"
      "\n";
  Trace t;
  ASSERT_TRUE(ParseTrace(text, Azure(), &t).ok());
  ASSERT_EQ(t.records.size(), 5u);
  EXPECT_EQ(t.origin_unix_ms, 1606092900138);
  EXPECT_EQ(t.skipped_rows, 0u);
  // Sorted by time; the two rows with equal Timestamp keep file order.
  EXPECT_EQ(t.records[0].key, "jfvf7k9kwiiq7gdx");
  EXPECT_EQ(t.records[0].time_us, 0);
  EXPECT_EQ(t.records[0].op, TraceOp::kRead);
  EXPECT_EQ(t.records[0].bytes, 30u);
  EXPECT_EQ(t.records[1].key, "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(t.records[1].time_us, 0);
  EXPECT_EQ(t.records[1].bytes, 0u);  // empty BlobBytes
  EXPECT_EQ(t.records[1].op, TraceOp::kRead);
  EXPECT_EQ(t.records[2].key, "cccccccccccccccc");
  EXPECT_EQ(t.records[2].time_us, 362'000);
  EXPECT_EQ(t.records[2].bytes, 5303u);  // 5302.6 rounds
  EXPECT_EQ(t.records[3].key, "bbbbbbbbbbbbbbbb");
  EXPECT_EQ(t.records[3].op, TraceOp::kWrite);
  EXPECT_EQ(t.records[3].bytes, 0u);
  EXPECT_EQ(t.records[4].key, "tp783etybrgxap8x");
  EXPECT_EQ(t.records[4].op, TraceOp::kWrite);
  EXPECT_EQ(t.records[4].bytes, 36u);
  EXPECT_EQ(t.records[4].time_us, (1606355700058 - 1606092900138) * 1000);
}

TEST(AzureReader, BadHeaderFailsOnLineOne) {
  Trace t;
  Status s = ParseTrace("time_ms,op,key,bytes\n0,read,a,1\n", Azure(), &t);
  ASSERT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message().rfind("trace.csv:1: ", 0), 0u) << s.message();
  s = ParseTrace("", Azure(), &t);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  // Even when skipping malformed rows: the file is not the format asked for.
  EXPECT_TRUE(ParseTrace("a,b\n", Azure(true), &t).IsInvalidArgument());
}

TEST(AzureReader, AbsurdTimestampSpanIsAnErrorNotAnOverflow) {
  // Found by the fuzzer: a 19-digit timestamp next to a normal one overflowed the
  // microsecond offsets (signed overflow, undefined behaviour).
  std::string text = std::string(kHeader) +
      "1951160521257705234,6ex,775920313,9gti3olh,1565080819,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,False\n"
      "1606092900138,6ex,775920313,9gti3olh,1565080820,aaaaaaaaaaaaaaaa,BlockBlob/,kq2su6bhi1,30.0,True,False\n";
  Trace t;
  Status s = ParseTrace(text, Azure(), &t);
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("too far apart"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("trace.csv", 0), 0u) << s.message();
}

TEST(AzureReader, MalformedRowsNameTheirLine) {
  const std::string good =
      "1606092900138,6ex,775920313,9gti3olh,1565080819,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,False\n";
  struct Case {
    std::string row;
    std::string reason_part;
  } cases[] = {
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,True\n", "exactly one"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,False,False\n", "exactly one"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,yes,False\n", "True or False"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True\n", "11 columns"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,False,x\n", "more than 11"},
      {"16060929x0138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,False\n", "Timestamp"},
      {"-5,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,30.0,True,False\n", "Timestamp"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,-3.0,True,False\n", "BlobBytes"},
      {"1606092900138,6ex,1,9gti3olh,1,jfvf7k9kwiiq7gdx,BlockBlob/,kq2su6bhi0,nan,True,False\n", "BlobBytes"},
      {"1606092900138,6ex,1,9gti3olh,1,,BlockBlob/,kq2su6bhi0,3.0,True,False\n", "AnonBlobName"},
  };
  for (const Case& c : cases) {
    std::string text = std::string(kHeader) + good + good + c.row + good;
    Trace t;
    Status s = ParseTrace(text, Azure(), &t);
    ASSERT_TRUE(s.IsInvalidArgument()) << c.row;
    EXPECT_EQ(s.message().rfind("trace.csv:4: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.reason_part), std::string::npos) << s.message();
    // Skip mode: the row is dropped and counted, the good rows are kept.
    ASSERT_TRUE(ParseTrace(text, Azure(true), &t).ok()) << c.row;
    EXPECT_EQ(t.records.size(), 3u);
    EXPECT_EQ(t.skipped_rows, 1u);
    EXPECT_EQ(t.first_skip_reason.rfind("trace.csv:4: ", 0), 0u) << t.first_skip_reason;
  }
}

TEST(AzureReader, TimeWindowAndRowCapAtReadTime) {
  std::string text = std::string(kHeader);
  for (int i = 0; i < 10; ++i) {
    text += std::to_string(1000 + i * 100) + ",r,1,a,1,key" + std::to_string(i) + ",BlockBlob/,e,10.0,True,False\n";
  }
  TraceReadOptions o = Azure();
  o.start_unix_ms = 1200;
  o.end_unix_ms = 1500;
  Trace t;
  ASSERT_TRUE(ParseTrace(text, o, &t).ok());
  ASSERT_EQ(t.records.size(), 3u);
  EXPECT_EQ(t.origin_unix_ms, 1200);
  EXPECT_EQ(t.records[2].key, "key4");
  EXPECT_EQ(t.records[2].time_us, 200'000);
  o = Azure();
  o.max_rows = 4;
  ASSERT_TRUE(ParseTrace(text, o, &t).ok());
  EXPECT_EQ(t.records.size(), 4u);
}

TEST(NativeReader, ParsesAliasesCommentsAndSorts) {
  std::string text =
      "# produced by hand\n"
      "time_ms,op,key,bytes\n"
      "10.5,READ,alpha,30\n"
      "\n"
      "# a comment between rows\n"
      "2,w,beta,800000\n"
      "3,Put,gamma,0\n"
      "3,get,delta,7\n";
  Trace t;
  ASSERT_TRUE(ParseTrace(text, Native(), &t).ok());
  ASSERT_EQ(t.records.size(), 4u);
  EXPECT_EQ(t.records[0].key, "beta");
  EXPECT_EQ(t.records[0].time_us, 2000);
  EXPECT_EQ(t.records[0].op, TraceOp::kWrite);
  EXPECT_EQ(t.records[0].bytes, 800000u);
  EXPECT_EQ(t.records[1].key, "gamma");
  EXPECT_EQ(t.records[1].op, TraceOp::kWrite);
  EXPECT_EQ(t.records[2].key, "delta");
  EXPECT_EQ(t.records[2].op, TraceOp::kRead);
  EXPECT_EQ(t.records[3].time_us, 10500);
  EXPECT_EQ(t.origin_unix_ms, 0);
}

TEST(NativeReader, MalformedRows) {
  const char* rows[] = {"1,delete,a,3", "x,read,a,3", "1,read,,3", "1,read,a,3.5", "1,read,a,-3",
                        "1,read,a", "1,read,a,b,3", "-1,read,a,3"};
  for (const char* row : rows) {
    std::string text = std::string("time_ms,op,key,bytes\n0,read,k,1\n") + row + "\n";
    Trace t;
    Status s = ParseTrace(text, Native(), &t);
    ASSERT_TRUE(s.IsInvalidArgument()) << row;
    EXPECT_EQ(s.message().rfind("trace.csv:3: ", 0), 0u) << s.message();
    ASSERT_TRUE(ParseTrace(text, Native(true), &t).ok());
    EXPECT_EQ(t.records.size(), 1u);
    EXPECT_EQ(t.skipped_rows, 1u);
  }
}

TEST(TraceFile, MissingFileIsIOErrorAndPathIsTheSourceName) {
  Trace t;
  EXPECT_TRUE(ReadTrace("/nonexistent/dir/trace.csv", Azure(), &t).IsIOError());
  std::string path = ::testing::TempDir() + "nvmw_bad_trace.csv";
  {
    std::ofstream f(path);
    f << "time_ms,op,key,bytes\n1,read,a,1\n2,oops,b,1\n";
  }
  TraceReadOptions o = Native();
  o.source_name.clear();
  Status s = ReadTrace(path, o, &t);
  ASSERT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message().rfind(path + ":3: ", 0), 0u) << s.message();
  std::remove(path.c_str());
}

TEST(TraceFile, AFifoNoOneWritesReadsAsEmptyAndADirectoryIsNamed) {
  // The open waited for a writer of the FIFO, forever; a directory was a "read error".
  std::string fifo = ::testing::TempDir() + "nvmw_trace_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Trace t;
  Status s = ReadTrace(fifo, Native(), &t);
  EXPECT_NE(s.message().find("empty file"), std::string::npos) << s.ToString();
  std::remove(fifo.c_str());
  s = ReadTrace(::testing::TempDir(), Native(), &t);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_NE(s.message().find("Is a directory"), std::string::npos) << s.ToString();
}

std::string ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(TraceWriter, LeavesOtherWritersTemporariesAndWritesThroughLinksAndFifos) {
  Trace t;
  t.records.push_back({0, TraceOp::kRead, "a", 10});
  std::string dir = ::testing::TempDir();
  // PATH.tmp was every writer's temporary: a second writer truncated the first one's.
  std::string path = dir + "nvmw_written.csv";
  {
    std::ofstream other(path + ".tmp");
    other << "another writer's trace";
  }
  ASSERT_TRUE(WriteTrace(path, t, TraceFormat::kNative, 0, false).ok());
  EXPECT_EQ(ReadWhole(path + ".tmp"), "another writer's trace");
  EXPECT_EQ(ReadWhole(path).rfind("time_ms,op,key,bytes\n", 0), 0u);
  // A link to a file is written through; the rename replaced the link.
  std::string link = dir + "nvmw_written_link.csv";
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  std::remove(path.c_str());
  {
    std::ofstream previous(path);
    previous << "previous";
  }
  ASSERT_TRUE(WriteTrace(link, t, TraceFormat::kNative, 0, false).ok());
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_NE(ReadWhole(path), "previous");
  // A FIFO is written into; the rename replaced it with a file.
  std::string fifo = dir + "nvmw_written_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(WriteTrace(fifo, t, TraceFormat::kNative, 0, false).ok());
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  char buf[256];
  ssize_t n = ::read(reader, buf, sizeof(buf));
  ::close(reader);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)).rfind("time_ms,op,key,bytes\n", 0), 0u);
  for (const std::string& p : {path, path + ".tmp", link, fifo}) std::remove(p.c_str());
}

void ExpectSameRecords(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(a.records[i].time_us, b.records[i].time_us) << i;
    EXPECT_EQ(a.records[i].op, b.records[i].op) << i;
    EXPECT_EQ(a.records[i].key, b.records[i].key) << i;
    EXPECT_EQ(a.records[i].bytes, b.records[i].bytes) << i;
  }
}

TEST(TraceWriter, RoundTripsBothFormats) {
  AzureSynthOptions o;
  o.rows = 2000;
  o.seed = 7;
  Trace synth;
  ASSERT_TRUE(SynthesizeAzure(o, &synth).ok());
  // Rows sharing a millisecond cannot get their order back from a shuffled file,
  // so the shuffled case compares in a canonical order.
  auto canonical = [](Trace t) {
    std::stable_sort(t.records.begin(), t.records.end(), [](const TraceRecord& a, const TraceRecord& b) {
      return std::tie(a.time_us, a.key, a.op, a.bytes) < std::tie(b.time_us, b.key, b.op, b.bytes);
    });
    return t;
  };
  for (TraceFormat f : {TraceFormat::kAzure, TraceFormat::kNative}) {
    for (bool shuffle : {false, true}) {
      std::string text;
      ASSERT_TRUE(FormatTrace(synth, f, 3, shuffle, &text).ok());
      TraceReadOptions ro = f == TraceFormat::kAzure ? Azure() : Native();
      Trace back;
      Status s = ParseTrace(text, ro, &back);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (shuffle && f == TraceFormat::kAzure) {
        ExpectSameRecords(canonical(synth), canonical(back));
      } else {
        ExpectSameRecords(synth, back);
      }
      if (f == TraceFormat::kAzure) {
        EXPECT_EQ(back.origin_unix_ms, synth.origin_unix_ms);
      }
    }
  }
  // Shuffled azure output is really unsorted, like the released file.
  std::string text;
  ASSERT_TRUE(FormatTrace(synth, TraceFormat::kAzure, 3, true, &text).ok());
  size_t first_nl = text.find('\n');
  std::string first_row = text.substr(first_nl + 1, text.find('\n', first_nl + 1) - first_nl - 1);
  EXPECT_EQ(first_row.find(std::to_string(synth.origin_unix_ms) + ","), std::string::npos);
  // Keys holding a comma cannot be written.
  Trace bad;
  bad.records.push_back({0, TraceOp::kRead, "a,b", 1});
  EXPECT_TRUE(FormatTrace(bad, TraceFormat::kNative, 0, false, &text).IsInvalidArgument());
}

TEST(TraceWriter, AzureWriteMintsNewETag) {
  Trace t;
  t.records.push_back({0, TraceOp::kRead, "blob0000000000aa", 10});
  t.records.push_back({1000, TraceOp::kRead, "blob0000000000aa", 10});
  t.records.push_back({2000, TraceOp::kWrite, "blob0000000000aa", 10});
  std::string text;
  ASSERT_TRUE(FormatTrace(t, TraceFormat::kAzure, 0, false, &text).ok());
  std::vector<std::string> etags;
  size_t pos = text.find('\n') + 1;
  while (pos < text.size()) {
    std::string row = text.substr(pos, text.find('\n', pos) - pos);
    pos += row.size() + 1;
    size_t c = 0;
    for (int i = 0; i < 7; ++i) c = row.find(',', c) + 1;
    etags.push_back(row.substr(c, row.find(',', c) - c));
  }
  ASSERT_EQ(etags.size(), 3u);
  EXPECT_EQ(etags[0], etags[1]);
  EXPECT_NE(etags[1], etags[2]);
  EXPECT_EQ(etags[0].size(), 10u);
}

TEST(TraceSummary, NearestRankPercentiles) {
  Trace t;
  for (int i = 1; i <= 100; ++i) {
    t.records.push_back({i * 10'000, i % 4 == 0 ? TraceOp::kWrite : TraceOp::kRead,
                         "k" + std::to_string(i % 30), static_cast<uint64_t>(i)});
  }
  TraceSummary s = SummarizeTrace(t);
  EXPECT_EQ(s.rows, 100u);
  EXPECT_EQ(s.writes, 25u);
  EXPECT_EQ(s.reads, 75u);
  EXPECT_EQ(s.bytes_p50, 50u);
  EXPECT_EQ(s.bytes_p99, 99u);
  EXPECT_EQ(s.bytes_max, 100u);
  EXPECT_EQ(s.distinct_keys, 30u);
  EXPECT_DOUBLE_EQ(s.duration_s, 0.99);
}

TEST(AzureSynth, FollowsPublishedStatistics) {
  AzureSynthOptions o;
  o.rows = 40000;
  o.seed = 11;
  o.max_blob_bytes = 0;  // no clip: compare with the published percentiles
  Trace t;
  ASSERT_TRUE(SynthesizeAzure(o, &t).ok());
  TraceSummary s = SummarizeTrace(t);
  EXPECT_EQ(s.rows, 40000u);
  EXPECT_NEAR(s.accesses_per_s, 36.6, 36.6 * 0.03);
  EXPECT_NEAR(static_cast<double>(s.writes) / s.rows, 0.2, 0.01);
  EXPECT_NEAR(static_cast<double>(s.distinct_keys) / s.rows, 0.5, 0.02);
  // Per-access sizes follow the per-blob percentiles (popularity is size-blind);
  // reuse makes them noisier than independent draws, hence the tolerances.
  EXPECT_GT(s.bytes_p50, 5302 * 0.7);
  EXPECT_LT(s.bytes_p50, 5302 * 1.3);
  EXPECT_GT(s.bytes_p99, 1589532 / 3);
  EXPECT_LT(s.bytes_p99, 1589532 * 3);
  // Roughly a third of accesses are below 1 KB.
  size_t small = 0;
  for (const TraceRecord& r : t.records) small += r.bytes < 1024;
  EXPECT_NEAR(static_cast<double>(small) / s.rows, 0.33, 0.06);
  // Heavy reuse: some blob is accessed far more than the mean of 2.
  std::map<std::string, int> per_key;
  int top = 0;
  for (const TraceRecord& r : t.records) top = std::max(top, ++per_key[r.key]);
  EXPECT_GT(top, 50);
  // Same seed, same trace; another seed, another trace.
  Trace again, other;
  ASSERT_TRUE(SynthesizeAzure(o, &again).ok());
  ExpectSameRecords(t, again);
  o.seed = 12;
  ASSERT_TRUE(SynthesizeAzure(o, &other).ok());
  EXPECT_NE(other.records[5].key, t.records[5].key);
}

TEST(SvdSynth, TaskGraphShape) {
  SvdSynthOptions o;
  o.tasks = 20;
  o.rows = 164 * 3;  // exactly three jobs of 8B + 4 records
  Trace t;
  ASSERT_TRUE(SynthesizeSvd(o, &t).ok());
  ASSERT_EQ(t.records.size(), o.rows);
  std::map<std::string, int> writes, reads;
  std::set<uint64_t> sizes;
  for (const TraceRecord& r : t.records) {
    sizes.insert(r.bytes);
    if (r.op == TraceOp::kWrite) {
      EXPECT_EQ(writes[r.key]++, 0) << "written twice: " << r.key;
    } else {
      EXPECT_EQ(writes.count(r.key), 1u) << "read before written: " << r.key;
      ++reads[r.key];
    }
  }
  EXPECT_EQ(writes.size(), 3u * (4 * 20 + 3));
  EXPECT_EQ(t.records.size() - writes.size(), 3u * (4 * 20 + 1));  // reads: about half
  EXPECT_EQ(sizes, (std::set<uint64_t>{8'000, 8'000'000, 80'000'000, 160'000'000, 168'000'000}));
  for (size_t i = 1; i < t.records.size(); ++i) {
    EXPECT_LE(t.records[i - 1].time_us, t.records[i].time_us);
  }
  EXPECT_TRUE(SynthesizeSvd(SvdSynthOptions{.rows = 0}, &t).IsInvalidArgument());
}

// Past the int64 microseconds of trace time the offsets wrapped: a rate of 1e-300
// wrote every row at one time, a task of 1e300 ms wrote negative times.
TEST(Synth, RefusesTracesThatWouldSpanPastTheClock) {
  Trace t;
  AzureSynthOptions a;
  a.rows = 10;
  a.accesses_per_s = 1e-300;
  Status s = SynthesizeAzure(a, &t);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  a.accesses_per_s = 1e-7;  // 9 gaps of 1e7 s: schedulable
  EXPECT_TRUE(SynthesizeAzure(a, &t).ok());
  SvdSynthOptions v;
  v.rows = 100;
  v.task_ms = 1e300;
  s = SynthesizeSvd(v, &t);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  v.task_ms = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(SynthesizeSvd(v, &t).IsInvalidArgument());
}

TEST(TraceFilter, WindowSizeAndCap) {
  Trace t;
  for (int i = 0; i < 100; ++i) {
    t.records.push_back({i * 100'000, TraceOp::kRead, "k" + std::to_string(i), static_cast<uint64_t>(i)});
  }
  TraceFilter f;
  f.start_s = 2.0;
  f.end_s = 5.0;
  f.min_bytes = 25;
  f.max_bytes = 40;
  Trace out;
  ASSERT_TRUE(FilterTrace(t, f, &out).ok());
  ASSERT_EQ(out.records.size(), 16u);  // offsets 2.5 .. 4.0 s
  EXPECT_EQ(out.records.front().key, "k25");
  EXPECT_EQ(out.records.front().time_us, 0);
  EXPECT_EQ(out.records.back().time_us, 1'500'000);
  f.max_records = 5;
  f.rebase = false;
  ASSERT_TRUE(FilterTrace(t, f, &out).ok());
  ASSERT_EQ(out.records.size(), 5u);
  EXPECT_EQ(out.records.front().time_us, 2'500'000);
  f = TraceFilter();
  f.start_s = 3;
  f.end_s = 3;
  EXPECT_TRUE(FilterTrace(t, f, &out).IsInvalidArgument());
  f = TraceFilter();
  f.min_bytes = 5;
  f.max_bytes = 4;
  EXPECT_TRUE(FilterTrace(t, f, &out).IsInvalidArgument());
  // In place.
  f = TraceFilter();
  f.max_records = 10;
  ASSERT_TRUE(FilterTrace(t, f, &t).ok());
  EXPECT_EQ(t.records.size(), 10u);
}

TEST(TraceTransform, FixedSizeExactRatioKeySpacePrefix) {
  Trace t;
  for (int i = 0; i < 1001; ++i) {
    t.records.push_back({i, TraceOp::kRead, "key" + std::to_string(i), 30});
  }
  TraceTransform x;
  x.fixed_bytes = 800 * 1000;
  x.write_ratio = 0.5;
  x.key_space = 64;
  x.key_prefix = "b/";
  x.seed = 3;
  Trace out;
  ASSERT_TRUE(TransformTrace(t, x, &out).ok());
  size_t writes = 0;
  std::set<std::string> keys;
  for (const TraceRecord& r : out.records) {
    EXPECT_EQ(r.bytes, 800'000u);
    writes += r.op == TraceOp::kWrite;
    keys.insert(r.key);
    EXPECT_EQ(r.key.rfind("b/k", 0), 0u) << r.key;
  }
  EXPECT_EQ(writes, 501u);  // round(1001 * 0.5)
  EXPECT_LE(keys.size(), 64u);
  EXPECT_GT(keys.size(), 50u);
  // Read-only and write-only ends.
  x = TraceTransform();
  x.write_ratio = 0;
  ASSERT_TRUE(TransformTrace(out, x, &out).ok());
  for (const TraceRecord& r : out.records) EXPECT_EQ(r.op, TraceOp::kRead);
  x.write_ratio = 1.5;
  EXPECT_TRUE(TransformTrace(t, x, &out).IsInvalidArgument());
  x = TraceTransform();
  x.fixed_bytes = -2;
  EXPECT_TRUE(TransformTrace(t, x, &out).IsInvalidArgument());
}

TEST(TraceFormatName, ParsesNames) {
  TraceFormat f;
  ASSERT_TRUE(ParseTraceFormat("AZURE", &f).ok());
  EXPECT_EQ(f, TraceFormat::kAzure);
  ASSERT_TRUE(ParseTraceFormat("native", &f).ok());
  EXPECT_EQ(f, TraceFormat::kNative);
  EXPECT_TRUE(ParseTraceFormat("parquet", &f).IsInvalidArgument());
}

}  // namespace
}  // namespace nvmw
