// The words of a command line checked before CLI11 parses them, so that a typo gets a "did you
// mean" naming the nearest command or flag instead of CLI11's "The following arguments were not
// expected", and `help [TOPIC]` and `--version` work.
#pragma once
#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <vector>

namespace ft {

// "" when every command word and every --flag of `args` (after the program name) belongs to
// the chosen (sub)command; else the message of the first that does not.
std::string check_command_words(CLI::App& app, const std::vector<std::string>& args);

// After parsing: "" when every integer flag given to the chosen (sub)commands is written in
// plain decimal; else a message naming the first that is not (CLI11 reads 010 as octal 8 and
// takes -1 for an unsigned flag as 2^64 - 1).
std::string check_integer_spellings(const CLI::App& app);

// After parsing: every flag of the chosen (sub)commands with its value, one "--flag<TAB>value"
// line each, sorted; the value read back from the setting it was parsed into (so --lr 1e-3 and
// --lr 0.001 give one line), given or default. Leaves out what may differ between the ranks
// of one run (--memory-limit, --host-memory-limit: each rank's own budget; --eval-batch-size,
// on which the ranks agree as their memory allows; --config's path, whose settings are in the
// other lines).
std::string settings_text(CLI::App& app);

// The long flags of a (sub)command, with their dashes ("--lr", ...), --help included.
std::set<std::string> long_flags(const CLI::App& app);

}  // namespace ft
