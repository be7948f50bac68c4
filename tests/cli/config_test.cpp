// --config FILE.toml: settings from a file, the command line overriding them, and clear errors
// for a file that cannot be used.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_util.h"

namespace ft {
namespace {
using namespace ft::testing;

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigFile, SetsFlagsAndTheCommandLineOverrides) {
  const std::string d = temp_dir("config_file");
  const std::string cfg = write(d, "small.toml",
                                "global_batch_size = 8\nn_layer = 1\nn-head = 2   # dashes work too\nn_embd = 32\n"
                                "seq_len = 32\nlr = 1e-4\n");
  CmdResult r = run_fittrain("plan --config " + cfg + " --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 8 ="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("L=1 H=2 C=32 T=32"), std::string::npos) << r.output;
  // the command line wins, before or after --config
  r = run_fittrain("plan --global-batch-size 4 --config " + cfg + " --results-dir " + d);
  EXPECT_NE(r.output.find("global batch 4 ="), std::string::npos) << r.output;
  r = run_fittrain("plan --config " + cfg + " --global-batch-size 2 --results-dir " + d);
  EXPECT_NE(r.output.find("global batch 2 ="), std::string::npos) << r.output;
}

TEST(ConfigFile, TheUsersNamedConfigurationPlans) {
  const std::string d = temp_dir("config_named");
  CmdResult r = run_fittrain(std::string("plan --config ") + FITTRAIN_SOURCE_DIR +
                             "/configs/pretrain-large.toml --n-layer 2 --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 192 ="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("T=192"), std::string::npos) << r.output;
}

TEST(ConfigFile, BadFilesAreRefusedNamingFileLineAndKey) {
  const std::string d = temp_dir("config_bad");
  struct Case {
    const char* text;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"global_bach_size = 8\n", {"line 1", "'global_bach_size'", "did you mean global-batch-size"}},
      {"lr = 1e-4\nlr_x = \n", {"line 2"}},
      {"[train]\nlr = 1\n", {"'train'", "tables are not settings"}},
      {"lr = [1, 2]\nconfig = \"x.toml\"\n", {"cannot name another"}},
      {"prompt = \"hi\"\n", {"'prompt'", "not a setting of this command"}},  // a sample flag given to train
      // a value of the wrong kind: CLI11 said only "The following argument was not expected"
      {"lr = [1e-3, 1e-4]\n", {"line 1", "'lr'", "--lr takes one value, not a list"}},
      {"lr = true\n", {"'lr'", "--lr takes a value, not true or false"}},
      // a value CLI11 cannot convert: its message named the flag, not the file
      {"max_steps = 2.5\n", {"--max-steps = 2.5", "--max-steps set by"}},
  };
  for (const Case& c : cases) {
    const std::string cfg = write(d, "bad.toml", c.text);
    CmdResult r = run_fittrain("train --config " + cfg + " --results-dir " + d);
    EXPECT_EQ(r.status, 2) << c.text << r.output;
    EXPECT_NE(r.output.find("--config " + cfg), std::string::npos) << r.output;
    for (const std::string& w : c.want) EXPECT_NE(r.output.find(w), std::string::npos) << c.text << "\n" << r.output;
  }
  CmdResult r = run_fittrain("train --config " + d + "/missing.toml --results-dir " + d);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("missing.toml: no such file"), std::string::npos) << r.output;
}

// --config is one file after a subcommand that takes one: a second was silently ignored, and a
// command without config files was told to put --config after the subcommand, where it was.
TEST(ConfigFile, OneFileAndOnlyForTheCommandsThatTakeOne) {
  const std::string d = temp_dir("config_twice");
  const std::string a = write(d, "a.toml", "global_batch_size = 8\n"), b = write(d, "b.toml", "n_layer = 1\n");
  CmdResult r = run_fittrain("plan --config " + a + " --config=" + b + " --results-dir " + d);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--config given twice (" + a + " and " + b + ")"), std::string::npos) << r.output;
  r = run_fittrain("tokenizer train --input x.txt --vocab-size 300 --out " + d + "/t --config " + a);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--config: fittrain tokenizer takes no config file"), std::string::npos) << r.output;
  r = run_fittrain("plan --config " + write(d, "c.toml", "json = \"true\"\n") + " --results-dir " + d);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("'json': --json is a switch: write true or false"), std::string::npos) << r.output;
  r = run_fittrain("--config " + a + " plan");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--config comes after the subcommand"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
