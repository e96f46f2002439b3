// LoadDeviceProfile: the one loader of device profiles (C++ tests and Python both use
// it). A profile TOML names CSV files, columns and scales; this turns them into curves.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "device/profile_text.h"
#include "nvmw/device.h"

namespace nvmw {

namespace {

namespace fs = std::filesystem;
using device::CsvTable;
using device::MiniToml;

bool IsPath(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".toml") == 0);
}

std::string KnownProfiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none found" : out;
}

// Reads the CSV files a profile names, each once.
class CsvCache {
 public:
  explicit CsvCache(std::string dir) : dir_(std::move(dir)) {}

  Status Get(const std::string& file, const CsvTable** table) {
    auto it = tables_.find(file);
    if (it == tables_.end()) {
      std::string path = (fs::path(dir_) / file).string();
      std::string text;
      Status s = device::ReadTextFile(path, &text);
      if (!s.ok()) return s;
      CsvTable t;
      s = t.Parse(text, path);
      if (!s.ok()) return s;
      it = tables_.emplace(file, std::move(t)).first;
    }
    *table = &it->second;
    return Status::OK();
  }

 private:
  std::string dir_;
  std::map<std::string, CsvTable> tables_;
};

// Curve from two numeric columns of the CSV named by `<table>.csv`, y scaled.
Status LoadCurve(MiniToml* toml, CsvCache* csvs, const std::string& table,
                 const std::string& x_key, const std::string& y_key, double scale,
                 DeviceCurve* curve) {
  std::string file, x_col, y_col;
  Status s;
  if (!(s = toml->GetString(table + ".csv", true, &file)).ok()) return s;
  if (!(s = toml->GetString(table + "." + x_key, true, &x_col)).ok()) return s;
  if (!(s = toml->GetString(table + "." + y_key, true, &y_col)).ok()) return s;
  const CsvTable* csv;
  if (!(s = csvs->Get(file, &csv)).ok()) return s;
  if (!(s = csv->NumericColumn(x_col, &curve->x)).ok()) return s;
  if (!(s = csv->NumericColumn(y_col, &curve->y)).ok()) return s;
  for (double& y : curve->y) y *= scale;
  for (size_t i = 1; i < curve->x.size(); ++i) {
    if (!(curve->x[i] > curve->x[i - 1])) {
      return Status::InvalidArgument(csv->filename() + ": column '" + x_col +
                                     "' must be strictly increasing");
    }
  }
  return Status::OK();
}

Status LoadLatency(MiniToml* toml, CsvCache* csvs, DeviceProfile* p) {
  std::string file, column, read_row, write_row;
  double scale = 1.0;
  Status s;
  if (!(s = toml->GetString("latency.csv", true, &file)).ok()) return s;
  if (!(s = toml->GetString("latency.column", true, &column)).ok()) return s;
  if (!(s = toml->GetString("latency.read_row", true, &read_row)).ok()) return s;
  if (!(s = toml->GetString("latency.write_row", true, &write_row)).ok()) return s;
  if (!(s = toml->GetNumber("latency.scale_ns", false, &scale)).ok()) return s;
  const CsvTable* csv;
  if (!(s = csvs->Get(file, &csv)).ok()) return s;
  if (!(s = csv->Cell(read_row, column, &p->read_latency_ns)).ok()) return s;
  if (!(s = csv->Cell(write_row, column, &p->write_latency_ns)).ok()) return s;
  p->read_latency_ns *= scale;
  p->write_latency_ns *= scale;
  return Status::OK();
}

Status LoadBandwidth(MiniToml* toml, CsvCache* csvs, DeviceProfile* p) {
  double scale = 1.0;
  Status s = toml->GetNumber("bandwidth.scale", false, &scale);
  if (!s.ok()) return s;
  if (!(s = LoadCurve(toml, csvs, "bandwidth", "x_column", "read_column", scale,
                      &p->read_bandwidth)).ok())
    return s;
  return LoadCurve(toml, csvs, "bandwidth", "x_column", "write_column", scale,
                   &p->write_bandwidth);
}

// Efficiency = bandwidth at a size / bandwidth at the reference size.
Status LoadAccessSize(MiniToml* toml, CsvCache* csvs, DeviceProfile* p) {
  if (!toml->HasTable("access_size")) return Status::OK();
  double reference = 0;
  Status s = toml->GetNumber("access_size.reference_bytes", true, &reference);
  if (!s.ok()) return s;
  struct Part {
    const char* key;
    DeviceCurve* curve;
  } parts[] = {{"read_column", &p->read_size_efficiency},
               {"write_column", &p->write_size_efficiency}};
  for (const Part& part : parts) {
    if (!(s = LoadCurve(toml, csvs, "access_size", "x_column", part.key, 1.0, part.curve)).ok())
      return s;
    DeviceCurve& c = *part.curve;
    if (reference < c.x.front() || reference > c.x.back()) {
      return Status::InvalidArgument("access_size.reference_bytes = " +
                                     std::to_string(reference) + " is outside the measured sizes");
    }
    double at_reference = c.At(reference);
    if (!(at_reference > 0)) return Status::InvalidArgument("access_size: bandwidth 0 at reference");
    for (double& y : c.y) y /= at_reference;
  }
  return Status::OK();
}

// Mixed readers/writers: rows labelled "R-W" (readers-writers out of one thread count).
// factor(W / (R + W)) = measured / linear interpolation between the pure-read and
// pure-write rows, so the model's linear mix times the factor gives the measurement.
Status LoadMix(MiniToml* toml, CsvCache* csvs, DeviceProfile* p) {
  if (!toml->HasTable("mix")) return Status::OK();
  std::string file, label_col, col;
  Status s;
  if (!(s = toml->GetString("mix.csv", true, &file)).ok()) return s;
  if (!(s = toml->GetString("mix.label_column", true, &label_col)).ok()) return s;
  if (!(s = toml->GetString("mix.column", true, &col)).ok()) return s;
  const CsvTable* csv;
  if (!(s = csvs->Get(file, &csv)).ok()) return s;
  std::vector<std::string> labels;
  std::vector<double> values;
  if (!(s = csv->TextColumn(label_col, &labels)).ok()) return s;
  if (!(s = csv->NumericColumn(col, &values)).ok()) return s;
  std::vector<std::pair<double, double>> points;  // (writer fraction, bandwidth)
  double total = -1;
  for (size_t i = 0; i < labels.size(); ++i) {
    size_t dash = labels[i].find('-');
    char* end = nullptr;
    double r = std::strtod(labels[i].c_str(), &end);
    double w = dash == std::string::npos ? -1 : std::strtod(labels[i].c_str() + dash + 1, nullptr);
    if (dash == std::string::npos || end != labels[i].c_str() + dash || r < 0 || w < 0 ||
        r + w <= 0) {
      return Status::InvalidArgument(csv->filename() + ": mix label '" + labels[i] +
                                     "' is not 'readers-writers'");
    }
    if (total >= 0 && r + w != total) {
      return Status::InvalidArgument(csv->filename() + ": mix rows must share one thread count");
    }
    total = r + w;
    points.emplace_back(w / total, values[i]);
  }
  std::sort(points.begin(), points.end());
  if (points.front().first != 0 || points.back().first != 1) {
    return Status::InvalidArgument(csv->filename() + ": mix needs pure-read and pure-write rows");
  }
  double pure_read = points.front().second, pure_write = points.back().second;
  p->mix_factor = DeviceCurve();
  for (const auto& [fw, bw] : points) {
    double linear = (1 - fw) * pure_read + fw * pure_write;
    p->mix_factor.x.push_back(fw);
    p->mix_factor.y.push_back(bw / linear);
  }
  return Status::OK();
}

// A number as the profile would write it ("4096", "0.5").
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status LoadWriteStall(MiniToml* toml, CsvCache* csvs, DeviceProfile* p) {
  if (!toml->HasTable("write_stall")) return Status::OK();
  double region = 0, scale = 1.0, probability = 0;
  Status s;
  if (!(s = toml->GetNumber("write_stall.hot_region_bytes", true, &region)).ok()) return s;
  if (!(s = toml->GetNumber("write_stall.scale_ns", false, &scale)).ok()) return s;
  if (!(s = toml->GetNumber("write_stall.probability", true, &probability)).ok()) return s;
  DeviceCurve tail;
  if (!(s = LoadCurve(toml, csvs, "write_stall", "x_column", "column", scale, &tail)).ok())
    return s;
  // The stall is read off the curve at the region size: a size outside the measured
  // ones (a negative one among them) would silently take the nearest end's stall.
  if (!(region >= tail.x.front() && region <= tail.x.back())) {
    return Status::InvalidArgument("write_stall.hot_region_bytes = " + Num(region) +
                                   " is outside the measured regions (" + Num(tail.x.front()) +
                                   " to " + Num(tail.x.back()) + ")");
  }
  p->write_stall_ns = tail.At(region);
  p->write_stall_probability = probability;
  return Status::OK();
}

}  // namespace

Status LoadDeviceProfile(const std::string& devices_dir, const std::string& name_or_path,
                         DeviceProfile* profile) {
  if (name_or_path.empty()) return Status::InvalidArgument("empty device profile name");
  std::string path;
  bool by_name = !IsPath(name_or_path);
  if (by_name) {
    for (char c : name_or_path) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
        return Status::InvalidArgument("bad device profile name '" + name_or_path + "'");
      }
    }
    path = (fs::path(devices_dir) / (name_or_path + ".toml")).string();
  } else {
    path = name_or_path;
  }
  std::string text;
  Status s = device::ReadTextFile(path, &text);
  if (s.IsNotFound() && by_name) {
    return Status::NotFound("no device profile '" + name_or_path + "' in " + devices_dir +
                            " (known: " + KnownProfiles(devices_dir) + ")");
  }
  if (!s.ok()) return s;
  MiniToml toml;
  if (!(s = toml.Parse(text, path)).ok()) return s;

  DeviceProfile p;
  p.passthrough = false;
  if (!(s = toml.GetString("name", true, &p.name)).ok()) return s;
  if (!(s = toml.GetString("description", false, &p.description)).ok()) return s;
  if (!(s = toml.GetBool("passthrough", false, &p.passthrough)).ok()) return s;
  if (by_name && p.name != name_or_path) {
    return Status::InvalidArgument(path + ": name = '" + p.name + "' but the file is '" +
                                   name_or_path + "'");
  }
  if (!p.passthrough) {
    std::string data_dir;
    if (!(s = toml.GetString("data_dir", true, &data_dir)).ok()) return s;
    fs::path base = fs::path(path).parent_path();
    CsvCache csvs(fs::path(data_dir).is_absolute() ? data_dir : (base / data_dir).string());
    if (!(s = LoadLatency(&toml, &csvs, &p)).ok()) return s;
    if (!(s = LoadBandwidth(&toml, &csvs, &p)).ok()) return s;
    if (!(s = LoadAccessSize(&toml, &csvs, &p)).ok()) return s;
    if (!(s = LoadMix(&toml, &csvs, &p)).ok()) return s;
    if (!(s = LoadWriteStall(&toml, &csvs, &p)).ok()) return s;
  }
  // Anything not read above is a typo or belongs to a passthrough profile by mistake.
  if (!(s = toml.CheckAllUsed()).ok()) return s;
  if (!(s = ValidateDeviceProfile(p)).ok()) return s;
  *profile = std::move(p);
  return Status::OK();
}

}  // namespace nvmw
