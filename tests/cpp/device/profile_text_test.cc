// Tests of the CSV and TOML-subset readers behind device profiles, and of the
// profile loader's error reporting.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "device/device_test_util.h"
#include "device/profile_text.h"
#include "nvmw/device.h"

namespace nvmw {
namespace {

using device::CsvTable;
using device::MiniToml;

TEST(CsvTableTest, ParsesHeaderRowsAndLabels) {
  CsvTable t;
  ASSERT_TRUE(t.Parse(",A,B\nrow\\one,1.5,2\r\nrow2, 3 ,4e1", "x.csv").ok());
  EXPECT_EQ(t.rows(), 2u);
  std::vector<double> b;
  ASSERT_TRUE(t.NumericColumn("B", &b).ok());
  EXPECT_EQ(b, (std::vector<double>{2, 40}));
  double v = 0;
  ASSERT_TRUE(t.Cell("row\\one", "A", &v).ok());
  EXPECT_DOUBLE_EQ(v, 1.5);
  ASSERT_TRUE(t.Cell("row2", "A", &v).ok());
  EXPECT_DOUBLE_EQ(v, 3);
}

TEST(CsvTableTest, ErrorsNameFileLineAndColumn) {
  CsvTable t;
  Status s = t.Parse("a,b\n1,2\n3\n", "bad.csv");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("bad.csv:3"), std::string::npos) << s.ToString();

  ASSERT_TRUE(t.Parse("a,b\n1,2\n3,x\n", "bad.csv").ok());
  std::vector<double> col;
  s = t.NumericColumn("b", &col);
  EXPECT_NE(s.message().find("bad.csv:3"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'x'"), std::string::npos) << s.ToString();
  s = t.NumericColumn("c", &col);
  EXPECT_NE(s.message().find("columns: 'a', 'b'"), std::string::npos) << s.ToString();
  double v;
  EXPECT_TRUE(t.Cell("nope", "a", &v).IsInvalidArgument());

  EXPECT_TRUE(t.Parse("", "empty.csv").IsInvalidArgument());
  EXPECT_TRUE(t.Parse("a,b\n", "header-only.csv").IsInvalidArgument());
}

TEST(MiniTomlTest, ReadsTheSubset) {
  MiniToml t;
  ASSERT_TRUE(t.Parse("# c\nname = \"x\\\\y \\\"q\\\"\"  # comment\n"
                      "lit = 'a\\b'\nflag = true\n[tab.sub]\nbig = 2_097_152\nf = -1.5e-5\n",
                      "t.toml")
                  .ok());
  std::string s;
  ASSERT_TRUE(t.GetString("name", true, &s).ok());
  EXPECT_EQ(s, "x\\y \"q\"");
  ASSERT_TRUE(t.GetString("lit", true, &s).ok());
  EXPECT_EQ(s, "a\\b");
  bool b = false;
  ASSERT_TRUE(t.GetBool("flag", true, &b).ok());
  EXPECT_TRUE(b);
  double d = 0;
  ASSERT_TRUE(t.GetNumber("tab.sub.big", true, &d).ok());
  EXPECT_EQ(d, 2097152);
  EXPECT_TRUE(t.CheckAllUsed().IsInvalidArgument());  // tab.sub.f not read yet
  ASSERT_TRUE(t.GetNumber("tab.sub.f", true, &d).ok());
  EXPECT_DOUBLE_EQ(d, -1.5e-5);
  EXPECT_TRUE(t.CheckAllUsed().ok());
  EXPECT_TRUE(t.HasTable("tab.sub"));

  double keep = 7;
  EXPECT_TRUE(t.GetNumber("absent", false, &keep).ok());
  EXPECT_EQ(keep, 7);
  EXPECT_TRUE(t.GetNumber("absent", true, &keep).IsInvalidArgument());
  EXPECT_TRUE(t.GetNumber("name", true, &keep).IsInvalidArgument());  // wrong type
}

TEST(MiniTomlTest, RejectsWhatItDoesNotSupportWithLineNumbers) {
  const char* bad[] = {
      "a = [1, 2]",   "a = {b = 1}",     "[[t]]",          "a = \"open",
      "a = 1_",       "a = 1 2",         "a",              "[t]\n[t]",
      "a = 1\na = 2", "a = \"\"\"x\"\"\"", "a = nan",      "a b = 1",
  };
  for (const char* text : bad) {
    MiniToml t;
    Status s = t.Parse(text, "bad.toml");
    EXPECT_TRUE(s.IsInvalidArgument()) << text;
    EXPECT_NE(s.message().find("bad.toml:"), std::string::npos) << s.ToString();
  }
}

class ProfileFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nvmw_device_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes a copy of optane-1dimm.toml with `from` replaced by `to`, pointing at the
  // real CSVs, and loads it.
  Status LoadEdited(const std::string& from, const std::string& to) {
    std::ifstream in(testing::DevicesDir() + "/optane-1dimm.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    at = text.find("data_dir = \"../optane-fast20\"");
    text.replace(at, std::string("data_dir = \"../optane-fast20\"").size(),
                 "data_dir = \"" + testing::Fast20Dir() + "\"");
    std::string path = (dir_ / "edited.toml").string();
    std::ofstream(path) << text;
    DeviceProfile p;
    return LoadDeviceProfile(dir_.string(), path, &p);
  }

  std::filesystem::path dir_;
};

TEST_F(ProfileFileTest, UnmodifiedCopyLoads) {
  EXPECT_TRUE(LoadEdited("name = ", "name = ").ok());
}

TEST_F(ProfileFileTest, ErrorsAreClear) {
  Status s = LoadEdited("x_column = \"Threads\"", "x_column = \"Thread\"");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("no column 'Thread'"), std::string::npos) << s.ToString();

  s = LoadEdited("[mix]", "[mix]\ncolour = \"red\"");
  EXPECT_NE(s.message().find("unknown key 'mix.colour'"), std::string::npos) << s.ToString();

  s = LoadEdited("04-bandwidth_thcount_optane_ni.csv", "missing.csv");
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();

  s = LoadEdited("read_row = 'Read\\Random'", "read_row = 'Read\\Nowhere'");
  EXPECT_NE(s.message().find("no row labelled"), std::string::npos) << s.ToString();

  s = LoadEdited("reference_bytes = 2_097_152", "reference_bytes = 3");
  EXPECT_NE(s.message().find("outside the measured sizes"), std::string::npos) << s.ToString();

  s = LoadEdited("probability = 0.0", "probability = 2.0");
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();

  // The stall is read off the measured curve; a region outside it (256 B .. 64 MiB in
  // the FAST'20 table) is refused, not clamped to the nearest end.
  for (const char* region : {"-5", "0", "100", "1e12"}) {
    s = LoadEdited("hot_region_bytes = 4096", std::string("hot_region_bytes = ") + region);
    EXPECT_TRUE(s.IsInvalidArgument()) << region << ": " << s.ToString();
    EXPECT_NE(s.message().find("outside the measured regions"), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(LoadEdited("hot_region_bytes = 4096", "hot_region_bytes = 256").ok());

  s = LoadEdited("[latency]", "[latency]\n");  // harmless edit still loads
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ReadTextFileTest, AFifoNoOneWritesReadsAsEmptyAndADirectoryIsNamed) {
  // The open waited for a writer of the FIFO, forever; a directory was "read failed".
  std::string fifo = ::testing::TempDir() + "nvmw_profile_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string text = "stale";
  EXPECT_TRUE(device::ReadTextFile(fifo, &text).ok());
  EXPECT_EQ(text, "");
  std::remove(fifo.c_str());
  Status s = device::ReadTextFile(::testing::TempDir(), &text);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_NE(s.message().find("Is a directory"), std::string::npos) << s.ToString();
}

TEST(LoadDeviceProfileTest, UnknownNameListsKnownProfiles) {
  DeviceProfile p;
  Status s = LoadDeviceProfile(testing::DevicesDir(), "optane-9dimm", &p);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_NE(s.message().find("optane-1dimm"), std::string::npos) << s.ToString();
  EXPECT_TRUE(LoadDeviceProfile(testing::DevicesDir(), "", &p).IsInvalidArgument());
  EXPECT_TRUE(LoadDeviceProfile(testing::DevicesDir(), "a b", &p).IsInvalidArgument());
}

}  // namespace
}  // namespace nvmw
