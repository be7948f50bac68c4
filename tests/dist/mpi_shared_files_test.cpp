// What the ranks of one run must see alike, and the refusal of a rank that does not: the
// results folder rank 0 holds, the same data, one checkpoint. Over several machines a path
// names each machine's own copy; here mpirun's MPMD form starts the ranks in two working
// folders (-wdir), so one relative path names two folders, as it would on two machines.
// Skips cleanly when mpirun is not installed or this build has no MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/cli_util.h"
#include "core/host_name.h"
#include "dist/mpi_util.h"

namespace ft {
namespace {
using namespace ft::testing;
namespace fs = std::filesystem;

// mpirun with rank 0 in folder a and rank 1 in folder b, each running `fittrain <args>`.
std::string in_two_folders(const std::string& a, const std::string& b, const std::string& args) {
  std::string cmd = timed_mpirun(120);
  const std::string run = std::string(FITTRAIN_BINARY) + " " + args;
  return cmd.replace(cmd.find("-np 2 "), 6, "-np 1 -wdir " + a + " " + run + " : -np 1 -wdir " + b + " " + run);
}

// A run refused with exit 2, saying `says`, that trained nothing (`checkpoints`: its folder).
void expect_refused(const CmdResult& r, const std::string& says, const std::string& checkpoints) {
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(checkpoints)) << "trained although refused";
}

const char* kTiny = " --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 --log-every 1";

// A rank whose --results-dir is another folder than rank 0's (a machine's own disk) is
// refused before anything is read or trained: it would not find the checkpoint rank 0
// resumes from, or would read another run's.
TEST(MpiE2E, ARankThatDoesNotSeeRankZerosResultsFolderIsRefused) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_results_not_shared");
  fs::create_directories(d + "/a");
  fs::create_directories(d + "/b");
  CmdResult r = run_command(in_two_folders(d + "/a", d + "/b", std::string("train") + kTiny +
                                                                    " --max-steps 2 --results-dir res"));
  const std::string host = host_name();
  expect_refused(r,
                 "this rank (1 of 2) does not see the folder rank 0 holds: its --results-dir res (" + d + "/b/res on " +
                     host + ") has no lock file (rank 0's: the lock of pid ",
                 d + "/a/res/checkpoints/ckpt_step_00000002.ftc");
  EXPECT_NE(r.output.find("over several machines --results-dir must be one folder every rank sees"), std::string::npos)
      << r.output;
  // The same relative path in one folder is one folder: the run trains.
  r = run_command(in_two_folders(d + "/a", d + "/a", std::string("train") + kTiny +
                                                          " --max-steps 2 --results-dir res --resume auto"));
  EXPECT_EQ(r.status, 0) << r.output;
  // Rank 0 says where every rank runs: its machine, device and pid.
  EXPECT_NE(r.output.find("placement  " + host + ": rank 0 cpu (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("), rank 1 cpu (pid "), std::string::npos) << r.output;
}

// Ranks whose copies of the data hold other numbers of samples would draw other orders of it
// (samples trained twice, others skipped), and copies with other bytes train on other data:
// refused, naming the flag and both counts, or the sample that differs.
TEST(MpiE2E, RanksReadingOtherDataAreRefusedNamingWhatDiffers) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_other_data");
  for (const auto& [folder, train] : {std::pair{"a", "32"}, std::pair{"b", "24"}}) {
    CmdResult prep = run_fittrain("prepare --synthetic eit --out " + d + "/" + folder +
                                  "/eit --train " + train + " --valid 8 --test 8 --image-size 32", 120);
    ASSERT_EQ(prep.status, 0) << prep.output;
  }
  const std::string args = "train --task diffusion --model dit-tiny --device cpu --data-path eit --global-batch-size 8 "
                           "--max-steps 1 --eval-every 0 --results-dir " + d + "/res";
  CmdResult r = run_command(in_two_folders(d + "/a", d + "/b", args));
  expect_refused(r,
                 "this rank (1 of 2) reads other data than rank 0: --data-path eit holds 24 samples (rank 0: 32): "
                 "every rank must read the same data",
                 d + "/res/checkpoints");
  // The same count, but rank 1's first sample is another image (the copy of the second):
  // the probes, first and last among them, find it.
  fs::remove_all(d + "/b/eit");
  fs::copy(d + "/a/eit", d + "/b/eit", fs::copy_options::recursive);
  fs::copy_file(d + "/a/eit/train/00001.npz", d + "/b/eit/train/00000.npz", fs::copy_options::overwrite_existing);
  expect_refused(run_command(in_two_folders(d + "/a", d + "/b", args)),
                 "this rank (1 of 2) reads other data than rank 0: --data-path eit: sample 0's bytes differ from "
                 "rank 0's (CRC-32C ",
                 d + "/res/checkpoints");
  // Two copies of the same data at the same path: one data set, the run trains.
  fs::copy_file(d + "/a/eit/train/00000.npz", d + "/b/eit/train/00000.npz", fs::copy_options::overwrite_existing);
  r = run_command(in_two_folders(d + "/a", d + "/b", args + " --resume auto"));
  EXPECT_EQ(r.status, 0) << r.output;
}

// `fittrain test` finds the checkpoint on each rank, and `--init-from DIR` reads the folder on
// each: ranks that found other checkpoints, or loaded other weights (each machine's own
// folder), are refused naming both; two copies of one checkpoint or one folder are one.
TEST(MpiE2E, RanksThatOpenedOtherCheckpointsOrWeightsAreRefused) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_other_checkpoints");
  for (const auto& [folder, steps] : {std::pair{"a", "2"}, std::pair{"b", "3"}}) {
    const std::string res = d + "/" + folder + "/res";
    CmdResult t = run_fittrain(std::string("train") + kTiny + " --max-steps " + steps + " --eval-every 0 --results-dir " + res,
                               120);
    ASSERT_EQ(t.status, 0) << t.output;
    t = run_fittrain("export --format hf --results-dir " + res + " --out " + d + "/" + folder + "/hf", 120);
    ASSERT_EQ(t.status, 0) << t.output;
  }
  const std::string test = "test --eval-batches 2 --results-dir res";
  CmdResult r = run_command(in_two_folders(d + "/a", d + "/b", test));
  EXPECT_EQ(r.status, 2) << r.output;
  const std::string host = host_name();
  // Named where each is: the same relative path names two files.
  EXPECT_NE(r.output.find("this rank (1 of 2) read the checkpoint " + d + "/b/res/checkpoints/ckpt_step_00000003.ftc on " +
                          host + " (step 3, run "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("which is not the one rank 0 read: " + d + "/a/res/checkpoints/ckpt_step_00000002.ftc on " +
                          host + " (step 2, run "),
            std::string::npos)
      << r.output;
  const std::string tune = std::string("train --init-from hf --global-batch-size 8 --max-steps 1 --eval-every 0 "
                                       "--results-dir ") + d + "/tuned";
  expect_refused(run_command(in_two_folders(d + "/a", d + "/b", tune)),
                 "this rank (1 of 2) loaded other weights than rank 0 from hf (CRC-32C of the weights ",
                 d + "/tuned/checkpoints/ckpt_step_00000001.ftc");

  for (const char* folder : {"res", "hf"}) {
    fs::remove_all(d + "/b/" + folder);
    fs::copy(d + "/a/" + folder, d + "/b/" + folder, fs::copy_options::recursive);
  }
  r = run_command(in_two_folders(d + "/a", d + "/b", test));
  EXPECT_EQ(r.status, 0) << r.output;
  r = run_command(in_two_folders(d + "/a", d + "/b", tune + " --resume auto"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(d + "/tuned/checkpoints/ckpt_step_00000001.ftc")) << r.output;
}

}  // namespace
}  // namespace ft
