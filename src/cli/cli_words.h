// The words of a command line checked before CLI11 parses them, so that a typo gets a "did you
// mean" naming the nearest command or flag instead of CLI11's "The following arguments were not
// expected", and `help [TOPIC]` and `--version` work.
#pragma once
#include <CLI/CLI.hpp>
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

// The long flags of a (sub)command, with their dashes ("--lr", ...), --help included.
std::set<std::string> long_flags(const CLI::App& app);

}  // namespace ft
