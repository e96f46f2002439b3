// CSV and TOML-subset readers for device profiles (see profile_text.h).
#include "device/profile_text.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "util/input_file.h"

namespace nvmw::device {

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// strtod on the whole string; false on trailing garbage, empty input, inf/nan text.
bool ParseDouble(const std::string& s, double* value) {
  if (s.empty()) return false;
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (end != begin + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
  *value = v;
  return true;
}

bool IsBareKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-';
}

}  // namespace

Status ReadTextFile(const std::string& path, std::string* text) {
  std::FILE* f = nullptr;
  if (int err = OpenInputFile(path, &f); err != 0) {
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": " + std::strerror(err));
  }
  text->clear();
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text->append(buf, n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::IOError(path + ": read failed");
  return Status::OK();
}

// ---------------------------------------------------------------- CSV

Status CsvTable::Parse(const std::string& text, const std::string& filename) {
  filename_ = filename;
  header_.clear();
  rows_.clear();
  row_lines_.clear();
  std::vector<std::string> lines = SplitLines(text);
  int line_no = 0;
  for (const std::string& raw : lines) {
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty()) continue;
    std::vector<std::string> cells;
    size_t start = 0;
    while (true) {
      size_t comma = line.find(',', start);
      cells.push_back(Trim(line.substr(start, comma == std::string::npos ? std::string::npos
                                                                         : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (header_.empty()) {
      header_ = std::move(cells);
      continue;
    }
    if (cells.size() != header_.size()) {
      return Status::InvalidArgument(filename_ + ":" + std::to_string(line_no) + ": " +
                                     std::to_string(cells.size()) + " cells, header has " +
                                     std::to_string(header_.size()));
    }
    rows_.push_back(std::move(cells));
    row_lines_.push_back(line_no);
  }
  if (header_.empty()) return Status::InvalidArgument(filename_ + ": empty CSV file");
  if (rows_.empty()) return Status::InvalidArgument(filename_ + ": header but no data rows");
  return Status::OK();
}

Status CsvTable::ColumnIndex(const std::string& name, size_t* index) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) {
      *index = i;
      return Status::OK();
    }
  }
  std::string known;
  for (const std::string& h : header_) known += (known.empty() ? "'" : ", '") + h + "'";
  return Status::InvalidArgument(filename_ + ": no column '" + name + "' (columns: " + known +
                                 ")");
}

Status CsvTable::ParseNumber(size_t row, size_t col, double* value) const {
  if (!ParseDouble(rows_[row][col], value)) {
    return Status::InvalidArgument(filename_ + ":" + std::to_string(row_lines_[row]) +
                                   ": column '" + header_[col] + "': not a number: '" +
                                   rows_[row][col] + "'");
  }
  return Status::OK();
}

Status CsvTable::NumericColumn(const std::string& name, std::vector<double>* values) const {
  size_t col;
  Status s = ColumnIndex(name, &col);
  if (!s.ok()) return s;
  values->assign(rows_.size(), 0.0);
  for (size_t r = 0; r < rows_.size(); ++r) {
    s = ParseNumber(r, col, &(*values)[r]);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status CsvTable::TextColumn(const std::string& name, std::vector<std::string>* values) const {
  size_t col;
  Status s = ColumnIndex(name, &col);
  if (!s.ok()) return s;
  values->clear();
  for (const auto& row : rows_) values->push_back(row[col]);
  return Status::OK();
}

Status CsvTable::Cell(const std::string& row_label, const std::string& name,
                      double* value) const {
  size_t col;
  Status s = ColumnIndex(name, &col);
  if (!s.ok()) return s;
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (rows_[r][0] == row_label) return ParseNumber(r, col, value);
  }
  return Status::InvalidArgument(filename_ + ": no row labelled '" + row_label + "'");
}

// ---------------------------------------------------------------- TOML subset

std::string MiniToml::Where(int line) const { return filename_ + ":" + std::to_string(line); }

Status MiniToml::Parse(const std::string& text, const std::string& filename) {
  filename_ = filename;
  values_.clear();
  tables_.clear();
  used_.clear();
  std::string table;
  int line_no = 0;
  for (const std::string& raw : SplitLines(text)) {
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(Where(line_no) + ": " + why);
    };
    if (line[0] == '[') {
      if (line.size() > 1 && line[1] == '[') return bad("arrays of tables are not supported");
      size_t close = line.find(']');
      if (close == std::string::npos) return bad("unterminated table header");
      std::string rest = Trim(line.substr(close + 1));
      if (!rest.empty() && rest[0] != '#') return bad("text after table header");
      table = Trim(line.substr(1, close - 1));
      if (table.empty()) return bad("empty table name");
      for (char c : table) {
        if (!IsBareKeyChar(c) && c != '.') return bad("bad table name '" + table + "'");
      }
      if (!tables_.insert(table).second) return bad("table [" + table + "] defined twice");
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) return bad("expected 'key = value'");
    std::string key = Trim(line.substr(0, eq));
    if (key.empty()) return bad("empty key");
    for (char c : key) {
      if (!IsBareKeyChar(c)) return bad("bad key '" + key + "' (use bare keys)");
    }
    std::string rhs = Trim(line.substr(eq + 1));
    if (rhs.empty()) return bad("missing value for '" + key + "'");
    Value v;
    v.line = line_no;
    size_t consumed = 0;
    if (rhs[0] == '"') {
      if (rhs.compare(0, 3, "\"\"\"") == 0) return bad("multi-line strings are not supported");
      v.type = Value::Type::kString;
      size_t i = 1;
      bool closed = false;
      for (; i < rhs.size(); ++i) {
        char c = rhs[i];
        if (c == '"') {
          closed = true;
          ++i;
          break;
        }
        if (c == '\\') {
          if (i + 1 >= rhs.size()) return bad("dangling escape");
          char e = rhs[++i];
          switch (e) {
            case '\\': v.text += '\\'; break;
            case '"': v.text += '"'; break;
            case 'n': v.text += '\n'; break;
            case 't': v.text += '\t'; break;
            default: return bad(std::string("unsupported escape \\") + e);
          }
        } else {
          v.text += c;
        }
      }
      if (!closed) return bad("unterminated string");
      consumed = i;
    } else if (rhs[0] == '\'') {
      if (rhs.compare(0, 3, "'''") == 0) return bad("multi-line strings are not supported");
      size_t close = rhs.find('\'', 1);
      if (close == std::string::npos) return bad("unterminated literal string");
      v.type = Value::Type::kString;
      v.text = rhs.substr(1, close - 1);
      consumed = close + 1;
    } else if (rhs[0] == '[' || rhs[0] == '{') {
      return bad("arrays and inline tables are not supported");
    } else {
      size_t end = rhs.find('#');
      std::string token = Trim(rhs.substr(0, end));
      consumed = rhs.size();
      if (end != std::string::npos) consumed = end;
      if (token == "true" || token == "false") {
        v.type = Value::Type::kBool;
        v.boolean = token == "true";
      } else {
        // Underscores are allowed only between digits, as in TOML.
        std::string digits;
        for (size_t i = 0; i < token.size(); ++i) {
          if (token[i] == '_') {
            bool ok = i > 0 && i + 1 < token.size() && std::isdigit((unsigned char)token[i - 1]) &&
                      std::isdigit((unsigned char)token[i + 1]);
            if (!ok) return bad("misplaced '_' in number '" + token + "'");
            continue;
          }
          digits += token[i];
        }
        bool plain = !digits.empty();
        for (char c : digits) {
          if (!(std::isdigit((unsigned char)c) || c == '.' || c == 'e' || c == 'E' || c == '+' ||
                c == '-')) {
            plain = false;
          }
        }
        if (!plain || !ParseDouble(digits, &v.number)) {
          return bad("value of '" + key + "' is not a string, number or boolean: '" + token +
                     "'");
        }
        v.type = Value::Type::kNumber;
      }
    }
    std::string rest = Trim(rhs.substr(consumed));
    if (!rest.empty() && rest[0] != '#') return bad("text after value of '" + key + "'");
    std::string full = table.empty() ? key : table + "." + key;
    if (values_.count(full)) return bad("key '" + full + "' defined twice");
    values_.emplace(full, std::move(v));
  }
  return Status::OK();
}

Status MiniToml::Find(const std::string& key, bool required, Value::Type type,
                      const Value** value) {
  *value = nullptr;
  auto it = values_.find(key);
  if (it == values_.end()) {
    if (required) return Status::InvalidArgument(filename_ + ": missing key '" + key + "'");
    return Status::OK();
  }
  used_.insert(key);
  if (it->second.type != type) {
    const char* want = type == Value::Type::kString   ? "a string"
                       : type == Value::Type::kNumber ? "a number"
                                                      : "true or false";
    return Status::InvalidArgument(Where(it->second.line) + ": '" + key + "' must be " + want);
  }
  *value = &it->second;
  return Status::OK();
}

Status MiniToml::GetString(const std::string& key, bool required, std::string* value) {
  const Value* v;
  Status s = Find(key, required, Value::Type::kString, &v);
  if (s.ok() && v) *value = v->text;
  return s;
}

Status MiniToml::GetNumber(const std::string& key, bool required, double* value) {
  const Value* v;
  Status s = Find(key, required, Value::Type::kNumber, &v);
  if (s.ok() && v) *value = v->number;
  return s;
}

Status MiniToml::GetBool(const std::string& key, bool required, bool* value) {
  const Value* v;
  Status s = Find(key, required, Value::Type::kBool, &v);
  if (s.ok() && v) *value = v->boolean;
  return s;
}

bool MiniToml::HasTable(const std::string& table) const { return tables_.count(table) > 0; }

Status MiniToml::CheckAllUsed() const {
  for (const auto& [key, v] : values_) {
    if (!used_.count(key)) {
      return Status::InvalidArgument(Where(v.line) + ": unknown key '" + key + "'");
    }
  }
  return Status::OK();
}

}  // namespace nvmw::device
