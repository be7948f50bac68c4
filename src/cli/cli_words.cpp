#include "cli/cli_words.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "cli/config_file.h"

namespace ft {

namespace {

std::string command_list(CLI::App& app) {
  std::string out;
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    out += (out.empty() ? "" : ", ") + s->get_name();
  return out;
}

CLI::App* find_sub(CLI::App& app, const std::string& name) {
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    if (s->get_name() == name) return s;
  return nullptr;
}

}  // namespace

std::set<std::string> long_flags(const CLI::App& app) {
  std::set<std::string> known = {"--help"};
  for (const CLI::Option* o : app.get_options())
    for (const std::string& n : o->get_lnames()) known.insert("--" + n);
  return known;
}

std::string check_command_words(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* cur = &app;
  std::string path = "fittrain";
  size_t i = 0;
  // Command words: while the current command has subcommands, the next word must name one.
  while (!cur->get_subcommands([](CLI::App*) { return true; }).empty()) {
    if (i >= args.size() || args[i].rfind("-", 0) == 0) {
      if (i < args.size() && (args[i] == "--help" || args[i] == "-h")) return "";
      return path + " needs a command: " + command_list(*cur) + " (" + path + " --help)";
    }
    CLI::App* sub = find_sub(*cur, args[i]);
    if (!sub) {
      std::set<std::string> names;
      for (CLI::App* s : cur->get_subcommands([](CLI::App*) { return true; })) names.insert(s->get_name());
      const std::string near = nearest_name(args[i], names);
      return "unknown command '" + args[i] + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
             "; " + path + " has: " + command_list(*cur);
    }
    path += " " + sub->get_name();
    cur = sub;
    ++i;
  }
  const std::set<std::string> known = long_flags(*cur);
  CLI::App* parent = cur->get_parent();
  for (; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0 || args[i] == "--") continue;
    const std::string flag = args[i].substr(0, args[i].find('='));
    if (known.count(flag)) continue;
    // A flag of a sibling command (e.g. --n-layer given to sample, whose model is the
    // checkpoint's): say whose it is rather than only that it is unknown here.
    std::string owners;
    if (parent)
      for (CLI::App* s : parent->get_subcommands([](CLI::App*) { return true; }))
        if (s != cur && long_flags(*s).count(flag)) owners += (owners.empty() ? "" : ", ") + s->get_name();
    if (!owners.empty())
      return flag + " is not a flag of '" + path + "' (it belongs to: " + owners + ")" +
             (cur->get_name() == "test" || cur->get_name() == "sample"
                  ? "; " + cur->get_name() + " takes the model and how it was trained from the checkpoint"
                  : "");
    const std::string near = nearest_name(flag, known);
    return "unknown flag " + flag + " for '" + path + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
           "; every flag: " + path + " --help";
  }
  return "";
}

}  // namespace ft

namespace ft {

std::string check_integer_spellings(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {  // the ones given
    for (const CLI::Option* o : sub->get_options()) {
      const std::string type = o->get_type_name();
      const bool is_int = type.rfind("INT", 0) == 0, is_uint = type.rfind("UINT", 0) == 0;
      if (!is_int && !is_uint) continue;
      for (const std::string& v : o->results()) {
        const size_t digits = v.find_first_not_of("+-");
        // CLI11 reads integers with base 0: 010 is 8 and 0x10 is 16. A seed or a step count
        // written with a leading zero is almost surely meant in decimal.
        if (digits != std::string::npos && v.size() > digits + 1 && v[digits] == '0')
          return o->get_name() + " " + v + ": write the number without a leading zero (it would be read as " +
                 (v[digits + 1] == 'x' || v[digits + 1] == 'X' ? "hexadecimal" : "octal") + ")";
        // strtoull takes "-1" as 2^64 - 1.
        if (is_uint && v.find('-') != std::string::npos)
          return o->get_name() + " " + v + ": must not be negative";
        // Past 64 bits CLI11 takes the largest value (2^64 for a seed is 2^64 - 1) instead of
        // refusing, as it refuses a value too large for a 32-bit flag.
        errno = 0;
        char* end = nullptr;
        if (is_uint) (void)std::strtoull(v.c_str(), &end, 10);
        else (void)std::strtoll(v.c_str(), &end, 10);
        if (errno == ERANGE)
          return o->get_name() + " " + v + ": out of range (" +
                 (is_uint ? "0 to " + std::to_string(UINT64_MAX) : "at most " + std::to_string(INT64_MAX) + " either way") + ")";
      }
    }
    if (std::string bad = check_integer_spellings(*sub); !bad.empty()) return bad;
  }
  return "";
}

std::string settings_text(CLI::App& app) {
  static const std::set<std::string> kPerRank = {"--memory-limit", "--host-memory-limit", "--eval-batch-size"};
  std::set<std::string> lines;
  std::vector<CLI::App*> given = app.get_subcommands();
  for (size_t i = 0; i < given.size(); ++i) {
    for (CLI::App* sub : given[i]->get_subcommands()) given.push_back(sub);
    for (CLI::Option* o : given[i]->get_options()) {
      const std::string name = o->get_name();
      if (name == "--help" || name == "--config" || kPerRank.count(name)) continue;
      // Read back from the variable the flag set (always_capture_default gave every flag bound
      // to one its reader); a flag with none keeps its last value as written.
      o->capture_default_str();
      std::string value = o->get_default_str();
      if (value.empty() && o->count() > 0) {
        const std::vector<std::string> written = o->reduced_results();
        for (size_t k = 0; k < written.size(); ++k) value += (k ? "," : "") + written[k];
      }
      for (char& ch : value)
        if (ch == '\n' || ch == '\t') ch = ' ';  // one line per flag
      lines.insert(name + "\t" + value);
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace ft
