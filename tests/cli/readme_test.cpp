// The README's "What else" block, run line by line in order, as a user would after the two
// setup commands: every line must succeed (a README that trains nothing, or whose commands
// fail, is a defect). Runs in a fresh folder holding the repository's README, docs and configs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

std::vector<std::string> what_else_commands() {
  std::ifstream in(std::string(FITTRAIN_SOURCE_DIR) + "/README.md");
  std::string line;
  bool section = false, block = false;
  std::vector<std::string> cmds;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) section = line == "## What else";
    if (!section) continue;
    if (line.rfind("```", 0) == 0) {
      if (block) break;  // the first code block of the section only
      block = true;
      continue;
    }
    if (!block || line.rfind("./build/fittrain", 0) != 0) continue;
    const size_t comment = line.find("  #");
    cmds.push_back(line.substr(std::string("./build/fittrain").size(), comment == std::string::npos
                                                                             ? std::string::npos
                                                                             : comment - 16));
  }
  return cmds;
}

TEST(Readme, WhatElseCommandsRunInOrder) {
  const std::vector<std::string> cmds = what_else_commands();
  ASSERT_GE(cmds.size(), 10u) << "README's What else block not found";
  const std::string dir = temp_dir("readme");
  namespace fs = std::filesystem;
  for (const char* entry : {"README.md", "docs", "configs"})
    fs::create_symlink(fs::path(FITTRAIN_SOURCE_DIR) / entry, fs::path(dir) / entry);
  char old[4096];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  for (const std::string& c : cmds) {
    CmdResult r = run_fittrain(c, 600);
    EXPECT_EQ(r.status, 0) << "fittrain" << c << "\n" << r.output;
    if (c.find("--resume auto") != std::string::npos)
      EXPECT_NE(r.output.find("resumed    from"), std::string::npos) << "fittrain" << c << "\n" << r.output;
    if (r.status != 0) break;
  }
  ASSERT_EQ(chdir(old), 0);
}

}  // namespace
}  // namespace ft
