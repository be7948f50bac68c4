#include "cli/cli_words.h"

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
