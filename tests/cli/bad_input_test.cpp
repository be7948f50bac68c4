// Bad input ends with exit status 2 and one clear message naming the file or flag, and never
// touches checkpoints already saved.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <fstream>
#include <unistd.h>
#include <vector>

#include "cli/cli_util.h"
#include "data/token_shard.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

void expect_error(const std::string& args, std::initializer_list<const char*> needles) {
  CmdResult r = run_fittrain(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  for (const char* n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << "'" << n << "' not in: " << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

void write_tokens(const std::string& path, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 200);
  write_shard(path, t);
}

TEST(BadInput, MissingFile) {
  expect_error("train --data-path /nonexistent/shard.bin --max-steps 1", {"/nonexistent/shard.bin", "--data-path"});
  expect_error("test --checkpoint /nonexistent/ckpt.ftc", {"/nonexistent/ckpt.ftc"});
  expect_error("prepare --input /nonexistent/a.txt --out /tmp/fittrain_test_x", {"/nonexistent/a.txt"});
}

TEST(BadInput, WrongMagic) {
  const std::string dir = temp_dir("magic"), path = dir + "/bad.bin";
  {
    std::ofstream f(path, std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 12345;
    header[1] = 1;
    header[2] = 10;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(std::string(20, 'x').data(), 20);
  }
  expect_error("train --data-path " + path + " --max-steps 1", {path.c_str(), "magic"});
}

TEST(BadInput, TruncatedShard) {
  const std::string dir = temp_dir("trunc"), path = dir + "/train.bin";
  write_tokens(path, 5000);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  expect_error("train --data-path " + path + " --max-steps 1", {path.c_str()});
}

TEST(BadInput, SequenceLongerThanShard) {
  const std::string dir = temp_dir("short"), path = dir + "/train.bin";
  write_tokens(path, 40);
  expect_error("train --data-path " + path + " --seq-len 64 --max-steps 1", {path.c_str(), "64"});
}

TEST(BadInput, TokenOutsideVocabulary) {
  const std::string dir = temp_dir("vocab"), path = dir + "/train.bin";
  std::vector<uint32_t> t(5000, 70000);
  write_shard(path, t);
  expect_error("train --data-path " + path + " --max-steps 1 --global-batch-size 2", {path.c_str()});
}

TEST(BadInput, NonsensicalFlags) {
  expect_error("train --global-batch-size 0", {"--global-batch-size"});
  expect_error("train --n-embd 100 --n-head 3", {"--n-embd", "--n-head"});
  expect_error("train --memory-limit lots", {"--memory-limit"});
  expect_error("train --micro-batch-size 0", {"--micro-batch-size"});
  expect_error("train --micro-batch-size 64 --global-batch-size 16", {"--micro-batch-size"});
  expect_error("train --lr -1", {"--lr"});
  expect_error("train --device tpu", {"--device"});
  expect_error("train --precision bf16 --device cpu", {"--precision"});
  expect_error("train --model gpt5", {"--model"});
  expect_error("train --log-every 0", {"--log-every"});
  expect_error("train --recompute sometimes", {"--recompute"});
  expect_error("train --no-such-flag 3", {"--no-such-flag"});
  expect_error("train --epochs banana", {"--epochs"});
  expect_error("plan --memory-limit 1KiB", {"nothing fits", "--memory-limit"});
}

TEST(BadInput, CheckpointsSurviveBadRunsAndCorruptionIsSkipped) {
  const std::string dir = temp_dir("keep");
  const std::string base = std::string("train ") + kSmallModel + " --results-dir " + dir +
                           " --log-every 1 --eval-every 0 --eval-batches 1 --keep-checkpoints 0";
  CmdResult r = run_fittrain(base + " --max-steps 4 --ckpt-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string c2 = checkpoint_path(checkpoint_dir(dir), 2), c4 = checkpoint_path(checkpoint_dir(dir), 4);
  const std::string before2 = read_file(c2), before4 = read_file(c4);

  // A bad flag on a resumed run changes nothing on disk.
  expect_error(base + " --max-steps 8 --resume auto --memory-limit 1KiB", {"--memory-limit"});
  EXPECT_EQ(read_file(c2), before2);
  EXPECT_EQ(read_file(c4), before4);
  // Another model shape refuses the checkpoint by name.
  expect_error(base + " --n-layer 3 --max-steps 8 --resume auto", {c4.c_str(), "n_layer"});
  EXPECT_EQ(read_file(c4), before4);

  // Corrupt the newest: an explicit resume names it; auto skips it with a warning.
  {
    std::fstream f(c4, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x5a');
  }
  expect_error(base + " --max-steps 6 --resume " + c4, {c4.c_str()});
  CmdResult a = run_fittrain(base + " --max-steps 6 --resume auto");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("warning"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("at step 2"), std::string::npos) << a.output;
  EXPECT_EQ(read_file(c2), before2);
}

TEST(Signals, TermSavesACheckpointAndExits130) {
  const std::string dir = temp_dir("signal");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execl(FITTRAIN_BINARY, FITTRAIN_BINARY, "train", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len",
          "32", "--results-dir", dir.c_str(), "--max-steps", "100000", "--log-every", "1", "--eval-every", "0",
          "--ckpt-every", "0", nullptr);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  bool sent = false;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (!sent && out.find("step      3/") != std::string::npos) {
      kill(pid, SIGTERM);
      sent = true;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(sent) << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << out;
  auto cks = list_checkpoints(checkpoint_dir(dir));
  ASSERT_EQ(cks.size(), 1u) << out;
  EXPECT_GE(cks[0].step, 3);
  EXPECT_NE(out.find("--resume auto"), std::string::npos) << out;
}

}  // namespace
}  // namespace ft
