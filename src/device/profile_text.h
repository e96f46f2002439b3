// Readers for the two text formats device profiles are made of: a small subset of
// TOML (the profile) and CSV tables with a header row (the FAST'20 measurements).
// Private to src/device; errors carry "file:line".
#ifndef NVMW_DEVICE_PROFILE_TEXT_H_
#define NVMW_DEVICE_PROFILE_TEXT_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "nvmw/status.h"

namespace nvmw::device {

// Reads a whole file. NotFound if it does not exist, IOError if it cannot be read.
Status ReadTextFile(const std::string& path, std::string* text);

// A CSV table: the first line is the header; cells are trimmed; no quoting (the
// measurement files need none). Every row must have as many cells as the header.
class CsvTable {
 public:
  Status Parse(const std::string& text, const std::string& filename);

  const std::string& filename() const { return filename_; }
  const std::vector<std::string>& header() const { return header_; }
  size_t rows() const { return rows_.size(); }

  // Index of the column named `name`; InvalidArgument naming the known columns if absent.
  Status ColumnIndex(const std::string& name, size_t* index) const;
  // All cells of column `name` as numbers; InvalidArgument with the line of a bad cell.
  Status NumericColumn(const std::string& name, std::vector<double>* values) const;
  // Cells of column `name` as text.
  Status TextColumn(const std::string& name, std::vector<std::string>* values) const;
  // The number in column `name` on the row whose first cell equals `row_label`.
  Status Cell(const std::string& row_label, const std::string& name, double* value) const;

 private:
  Status ParseNumber(size_t row, size_t col, double* value) const;

  std::string filename_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> row_lines_;  // source line of each row, for messages
};

// The TOML subset profiles use: `# comments`, `[table]` headers (dotted names allowed),
// `key = value` with value a "basic string" (escapes \\ \" \n \t), a 'literal string',
// an integer or float (underscores between digits allowed), or true/false.
// Arrays, inline tables and multi-line strings are rejected with a clear error, so a
// profile file is always valid TOML that Python's tomllib reads the same way.
class MiniToml {
 public:
  Status Parse(const std::string& text, const std::string& filename);

  // Keys are "table.key" ("key" at top level). Missing required keys and keys of the
  // wrong type are InvalidArgument; an optional missing key leaves *value unchanged.
  Status GetString(const std::string& key, bool required, std::string* value);
  Status GetNumber(const std::string& key, bool required, double* value);
  Status GetBool(const std::string& key, bool required, bool* value);
  bool HasTable(const std::string& table) const;

  // InvalidArgument naming the first key that no Get* call asked for (a typo guard).
  Status CheckAllUsed() const;

 private:
  struct Value {
    enum class Type { kString, kNumber, kBool } type;
    std::string text;
    double number = 0;
    bool boolean = false;
    int line = 0;
  };
  Status Find(const std::string& key, bool required, Value::Type type, const Value** value);
  std::string Where(int line) const;

  std::string filename_;
  std::map<std::string, Value> values_;
  std::set<std::string> tables_;
  std::set<std::string> used_;
};

}  // namespace nvmw::device

#endif  // NVMW_DEVICE_PROFILE_TEXT_H_
