#include "cli/config_file.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <toml++/toml.h>

#include "core/error.h"

namespace ft {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A scalar as the command line would spell it. Floats keep every digit (%.17g).
std::string scalar_text(const toml::node& v, const std::string& where) {
  if (auto s = v.as_string()) return s->get();
  if (auto i = v.as_integer()) return std::to_string(i->get());
  if (auto f = v.as_floating_point()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", f->get());
    return buf;
  }
  throw UserError(where + ": expected a string or a number");
}

}  // namespace

std::string nearest_name(const std::string& name, const std::set<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& k : known) {
    const size_t d = edit_distance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  // Close: at most a third of the name wrong (typos, a dropped or swapped letter).
  return best_d <= std::max<size_t>(2, name.size() / 3) ? best : std::string();
}

std::vector<std::string> config_file_args(const std::string& path, const std::map<std::string, FlagValues>& known) {
  FT_USER_CHECK(std::filesystem::is_regular_file(path), "--config ", path, ": no such file");
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "--config " << path << ": line " << e.source().begin.line << ", column " << e.source().begin.column
        << ": " << e.description();
    throw UserError(msg.str());
  }
  std::vector<std::string> args;
  for (auto&& [key, value] : table) {
    std::string name(key.str());
    std::replace(name.begin(), name.end(), '_', '-');
    const std::string flag = "--" + name;
    const std::string where = detail::concat("--config ", path, ": line ", value.source().begin.line, ": '",
                                             key.str(), "'");
    FT_USER_CHECK(name != "config", where, ": a config file cannot name another");
    FT_USER_CHECK(!value.is_table(), where, ": tables are not settings (write the flags at the top level)");
    const auto it = known.find(flag);
    if (it == known.end()) {
      std::set<std::string> names;
      for (const auto& entry : known) names.insert(entry.first);
      const std::string near = nearest_name(flag, names);
      throw UserError(where + " is not a setting of this command" +
                      (near.empty() ? std::string() : " (did you mean " + near.substr(2) + "?)"));
    }
    const FlagValues kind = it->second;
    // A value of the wrong kind would reach CLI11 as words it cannot place ("--overwrite true":
    // "The following argument was not expected"), naming neither the file nor the key.
    FT_USER_CHECK(kind != FlagValues::kSwitch || value.is_boolean(), where, ": ", flag,
                  " is a switch: write true or false");
    if (auto b = value.as_boolean()) {
      FT_USER_CHECK(kind == FlagValues::kSwitch, where, ": ", flag, " takes a value, not true or false");
      if (b->get()) args.push_back(flag);
      continue;
    }
    if (auto arr = value.as_array()) {
      FT_USER_CHECK(kind == FlagValues::kList, where, ": ", flag, " takes one value, not a list");
      FT_USER_CHECK(!arr->empty(), where, ": an empty list");
      args.push_back(flag);
      for (const toml::node& item : *arr) args.push_back(scalar_text(item, where));
      continue;
    }
    args.push_back(flag);
    args.push_back(scalar_text(value, where));
  }
  return args;
}

}  // namespace ft
