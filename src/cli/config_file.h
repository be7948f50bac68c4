// --config FILE.toml: a run's settings in a file, the command line overriding it (the users'
// habit of one named configuration per experiment). Every top-level key is a flag of the
// subcommand without its dashes (global_batch_size = 192, or "global-batch-size"); tables are
// not used. An unknown key, or a value of the wrong kind, is refused naming the file, the line
// and the key (with the nearest flag when there is one).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ft {

// How many values a flag takes: a switch (--overwrite), one value, or a list (--input).
enum class FlagValues { kSwitch, kOne, kList };

// The flags the file sets, as command-line words ("--lr", "0.0001", ...), for a subcommand
// whose long flags are `known` ("--lr", ...), with how many values each takes. Booleans, for
// switches only: true gives the bare flag, false nothing. Arrays, for list flags only, give the
// flag once followed by every element (e.g. prepare's --input). A value of the wrong kind is
// refused naming the file, the line and the key.
std::vector<std::string> config_file_args(const std::string& path, const std::map<std::string, FlagValues>& known);

// The name of `known` nearest to `name` (a flag or a command) by edit distance, or "" when none is close.
std::string nearest_name(const std::string& name, const std::set<std::string>& known);

}  // namespace ft
