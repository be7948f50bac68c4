// Data parallelism over MPI (CPU ranks): the communicator's collectives under mpirun -np 2,
// and a 2-rank training run against one process accumulating the same global batch.
// Both skip cleanly when mpirun is not installed or this build has no MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cli/cli_util.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"

namespace ft {
namespace {
using namespace ft::testing;

// Runs only as a rank of the mpirun started by MpiCommunicator.CollectivesUnderMpirun (alone, it
// skips). Rank r contributes r + 1 (and friends); every collective is checked against its sum.
TEST(MpiRanks, Collectives) {
  if (launcher_world_size() < 2) GTEST_SKIP() << "runs only as a rank under mpirun (see CollectivesUnderMpirun)";
  auto be = make_cpu_backend();
  auto comm = make_communicator(*be, rank_placement_from_env(), 60);
  const int r = comm->rank(), w = comm->world_size();
  ASSERT_EQ(w, 2);
  EXPECT_NE(comm->describe().find("MPI"), std::string::npos);
  std::vector<float> a = {float(r + 1), float(10 * (r + 1)), 0.5f, -1.0f};
  comm->all_reduce_sum(Tensor(a.data(), DType::f32, {4}));
  EXPECT_EQ(a, (std::vector<float>{3, 30, 1, -2}));
  // f64 in backend memory: the training step's sums (train/runtime.h), exact past f32's digits.
  std::vector<double> sums = {1e10 + r, 0.5 * r};
  comm->all_reduce_sum(Tensor(sums.data(), DType::f64, {2}));
  EXPECT_EQ(sums, (std::vector<double>{2e10 + 1, 0.5}));
  std::vector<int32_t> ints = {r};
  EXPECT_THROW(comm->all_reduce_sum(Tensor(ints.data(), DType::i32, {1})), InternalError);
  double d[2] = {0.25 * (r + 1), -1.0};
  comm->all_reduce_sum(d);
  EXPECT_EQ(d[0], 0.75);
  EXPECT_EQ(d[1], -2.0);
  EXPECT_EQ(comm->all_reduce_min(100 - r), 99);
  EXPECT_EQ(comm->all_reduce_min(int64_t(1) << 40 | r), int64_t(1) << 40);
  std::vector<float> shard = {float(r), float(r) + 0.5f}, all(4);
  comm->all_gather(Tensor(shard.data(), DType::f32, {2}), Tensor(all.data(), DType::f32, {4}));
  EXPECT_EQ(all, (std::vector<float>{0, 0.5f, 1, 1.5f}));
  // In place: this rank's shard is already its part of the output.
  std::vector<float> inplace = {-1, -1, -1, -1};
  inplace[2 * r] = 10.0f * r;
  inplace[2 * r + 1] = 10.0f * r + 1;
  comm->all_gather(Tensor(inplace.data() + 2 * r, DType::f32, {2}), Tensor(inplace.data(), DType::f32, {4}));
  EXPECT_EQ(inplace, (std::vector<float>{0, 1, 10, 11}));
  // A group of sums, each everywhere.
  std::vector<float> first = {float(r + 1), 1}, second = {float(r + 1), 2};
  const Tensor parts[2] = {Tensor(first.data(), DType::f32, {2}), Tensor(second.data(), DType::f32, {2})};
  comm->all_reduce_group(parts);
  EXPECT_EQ(first, (std::vector<float>{3, 2}));
  EXPECT_EQ(second, (std::vector<float>{3, 4}));
  // ZeRO-1's chunk collectives, in place (two chunks of 4: rank r's piece is [2r, 2r + 2)).
  std::vector<float> chunks = {1.0f * (r + 1), 2.0f * (r + 1), 3.0f * (r + 1), 4.0f * (r + 1),
                               10.0f * (r + 1), 20.0f * (r + 1), 30.0f * (r + 1), 40.0f * (r + 1)};
  const Tensor two[2] = {Tensor(chunks.data(), DType::f32, {4}), Tensor(chunks.data() + 4, DType::f32, {4})};
  comm->reduce_scatter_group(two);
  EXPECT_EQ(chunks[2 * r], 3.0f * (2 * r + 1));
  EXPECT_EQ(chunks[2 * r + 1], 3.0f * (2 * r + 2));
  EXPECT_EQ(chunks[4 + 2 * r], 30.0f * (2 * r + 1));
  EXPECT_EQ(chunks[4 + 2 * r + 1], 30.0f * (2 * r + 2));
  for (int i = 0; i < 8; ++i)
    if (i % 4 / 2 != r) chunks[static_cast<size_t>(i)] = -7.0f;  // the other rank's pieces: to be gathered
  comm->all_gather_group(two);
  EXPECT_EQ(chunks, (std::vector<float>{3, 6, 9, 12, 30, 60, 90, 120}));
  const Tensor odd[1] = {Tensor(chunks.data(), DType::f32, {3})};
  EXPECT_THROW(comm->all_gather_group(odd), InternalError);
  std::vector<float> b = {float(r), float(r)};
  comm->broadcast(Tensor(b.data(), DType::f32, {2}), 1);
  EXPECT_EQ(b, (std::vector<float>{1, 1}));
  int32_t word = r == 0 ? 12345 : 0;
  comm->broadcast(Tensor(&word, DType::i32, {1}), 0);
  EXPECT_EQ(word, 12345);
  comm->barrier();
  EXPECT_THROW(comm->all_gather(Tensor(shard.data(), DType::f32, {2}), Tensor(all.data(), DType::f32, {2})),
               InternalError);
  EXPECT_THROW(comm->broadcast(Tensor(b.data(), DType::f32, {2}), 2), InternalError);
}

TEST(MpiCommunicator, CollectivesUnderMpirun) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  char self[4096] = {0};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  CmdResult r = run_command(std::string(kMpirun) + self + " --gtest_color=no --gtest_filter=MpiRanks.Collectives");
  ASSERT_EQ(r.status, 0) << r.output;
  // Both ranks ran the test (none skipped).
  size_t passed = 0;
  for (size_t pos = 0; (pos = r.output.find("[  PASSED  ] 1 test", pos)) != std::string::npos; ++pos) ++passed;
  EXPECT_EQ(passed, 2u) << r.output;
  EXPECT_EQ(r.output.find("SKIPPED"), std::string::npos) << r.output;
}


// Two ranks x micro-batch 4 (no accumulation) against one process x micro-batch 4 x 2
// accumulated, global batch 8, 4 steps; the two ranks once with the optimizer state
// replicated and once sharded (--zero-stage 1: each chunk's gradients reduce-scattered,
// AdamW on this rank's pieces, parameters all-gathered chunk by chunk). FT_SHARD_CHUNK=1000
// cuts the ~22k parameters into 23 chunks, so the interleaved layout is exercised. Every loss unit has the same weight
// 1/units (units summed over ranks) in all three, and rank r's samples are the single
// process's micro-batch r, so the only difference is the order of the fp32 gradient sums
// (a reduction of two partial sums vs accumulation in place): agreement to rounding (1e-5 of
// each section's largest value), not bitwise. Sharding itself changes no arithmetic, so the
// sharded and replicated 2-rank runs agree to the last bit.
TEST(MpiE2E, TwoRanksMatchOneProcessAccumulatingWithAndWithoutZero) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string a = temp_dir("mpi_two_ranks"), z = temp_dir("mpi_two_ranks_zero1"),
                    b = temp_dir("mpi_one_process");
  const std::string args = std::string(" train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 ") +
                           "--micro-batch-size 4 --max-steps 4 --lr 1e-3 --warmup-steps 0 --log-every 1 " +
                           "--eval-every 0 --eval-batches 1 --metrics-file ";
  const std::string chunked = "FT_SHARD_CHUNK=1000 " + std::string(kMpirun);
  CmdResult two = run_command(chunked + FITTRAIN_BINARY + args + a + "/metrics.jsonl --results-dir " + a +
                            " --zero-stage 0");
  ASSERT_EQ(two.status, 0) << two.output;
  CmdResult zero = run_command(chunked + FITTRAIN_BINARY + args + z + "/metrics.jsonl --results-dir " + z +
                             " --zero-stage 1");
  ASSERT_EQ(zero.status, 0) << zero.output;
  // ZeRO-1 with one update, then one gather of every chunk, instead of the gather of each
  // chunk queued as the update writes it (FT_ZERO_OVERLAP=0): the same weights, bitwise.
  const std::string zp = temp_dir("mpi_two_ranks_zero1_no_overlap");
  CmdResult plain = run_command("FT_ZERO_OVERLAP=0 " + chunked + FITTRAIN_BINARY + args + zp +
                                "/metrics.jsonl --results-dir " + zp + " --zero-stage 1");
  ASSERT_EQ(plain.status, 0) << plain.output;
  // ZeRO-1 with the default chunks (one chunk for so few parameters: a contiguous shard per
  // rank): the gradient norm's parts are summed in another order, so within rounding.
  const std::string zq = temp_dir("mpi_two_ranks_zero1_one_chunk");
  CmdResult one_chunk = run_command(std::string(kMpirun) + FITTRAIN_BINARY + args + zq +
                                    "/metrics.jsonl --results-dir " + zq + " --zero-stage 1");
  ASSERT_EQ(one_chunk.status, 0) << one_chunk.output;
  CmdResult one = run_command(std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY + args + b +
                            "/metrics.jsonl --results-dir " + b);
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("micro-batch 4 x 2 accumulation x 1 rank"), std::string::npos) << one.output;
  EXPECT_NE(two.output.find("micro-batch 4 x 1 accumulation x 2 rank"), std::string::npos) << two.output;
  EXPECT_NE(zero.output.find("ZeRO stage 1"), std::string::npos) << zero.output;
  EXPECT_NE(two.output.find("ZeRO stage 0"), std::string::npos) << two.output;

  // Rank 0 alone prints and writes: one log line per step, one metrics row per step.
  size_t lines = 0;
  for (size_t pos = 0; (pos = two.output.find("step      4/4", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 1u) << two.output;
  size_t rows = 0;
  for (char c : read_file(a + "/metrics.jsonl")) rows += c == '\n';
  EXPECT_EQ(rows, 5u) << read_file(a + "/metrics.jsonl");  // 4 steps + the final evaluation
  EXPECT_NE(two.output.find("(max of 2 ranks)"), std::string::npos) << two.output;

  const std::string ca = checkpoint_path(checkpoint_dir(a), 4), cz = checkpoint_path(checkpoint_dir(z), 4),
                    cb = checkpoint_path(checkpoint_dir(b), 4);
  ASSERT_TRUE(std::filesystem::exists(ca)) << two.output;
  ASSERT_TRUE(std::filesystem::exists(cz)) << zero.output;
  ASSERT_TRUE(std::filesystem::exists(cb)) << one.output;
  for (const char* section : {"params", "adam_m", "adam_v"}) {
    const std::vector<float> pa = checkpoint_floats(ca, section), pz = checkpoint_floats(cz, section), pb = checkpoint_floats(cb, section);
    ASSERT_EQ(pa.size(), pb.size()) << section;
    ASSERT_EQ(pz.size(), pb.size()) << section;
    const double max_rel = max_rel_diff(pa, pb, pb), max_rel_zero = max_rel_diff(pz, pb, pb);
    std::printf("%s: %zu values, max |two ranks - one process| / max |value| = %.3g, with ZeRO-1 %.3g\n", section,
                pa.size(), max_rel, max_rel_zero);
    EXPECT_LT(max_rel, 1e-5) << section;
    EXPECT_LT(max_rel_zero, 1e-5) << section;
    EXPECT_EQ(0, std::memcmp(pa.data(), pz.data(), pa.size() * sizeof(float))) << section << ": ZeRO-1 changed the arithmetic";
    const std::vector<float> pp = checkpoint_floats(checkpoint_path(checkpoint_dir(zp), 4), section);
    ASSERT_EQ(pp.size(), pz.size()) << section;
    EXPECT_EQ(0, std::memcmp(pp.data(), pz.data(), pz.size() * sizeof(float))) << section << ": overlapped gathers differ";
    const std::vector<float> pq = checkpoint_floats(checkpoint_path(checkpoint_dir(zq), 4), section);
    ASSERT_EQ(pq.size(), pz.size()) << section;
    EXPECT_LT(max_rel_diff(pq, pz, pb), 1e-5) << section << ": one chunk against 23";
  }
}


// The diffusion task's EMA under ZeRO-1 (optim/shard_layout.h): each rank averages its own
// pieces of the weights, evaluation swaps the EMA weights in and back piece by piece (every 3
// steps here), and the checkpoint gathers the EMA section through the whole layout. With the
// same chunks (23 over dit-tiny's parameters) the sharded and replicated 2-rank runs do the
// same arithmetic, so their weights, moments and EMA agree to the last bit, and so do the
// evaluation lines printed on the EMA weights.
TEST(MpiE2E, DiffusionEmaUnderZeroOneMatchesReplicatedBitwise) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string data = temp_dir("mpi_ema_data") + "/eit32";
  CmdResult prep = run_command(std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY + " prepare --synthetic eit --out " +
                               data + " --train 64 --valid 16 --test 16 --image-size 32");
  ASSERT_EQ(prep.status, 0) << prep.output;
  const std::string args = " train --task diffusion --model dit-tiny --device cpu --data-path " + data +
                           " --global-batch-size 8 --max-steps 6 --eval-every 3 --eval-batches 1 --eval-images 4"
                           " --ckpt-every 6 --ema-decay 0.9 --ema-every 1 --ema-warmup 0 --ema-power 0 --lr 1e-3"
                           " --warmup-steps 0 --log-every 3 --results-dir ";
  std::string out[2], evals[2];
  for (int z = 0; z < 2; ++z) {
    const std::string d = temp_dir("mpi_ema_z" + std::to_string(z));
    CmdResult r = run_command("FT_SHARD_CHUNK=1000 " + std::string(kMpirun) + FITTRAIN_BINARY + args + d +
                              " --zero-stage " + std::to_string(z));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO stage " + std::to_string(z)), std::string::npos) << r.output;
    out[z] = d;
    // The evaluation lines without their timing ("| 0.2 s").
    for (size_t at = 0; (at = r.output.find("eval       step", at)) != std::string::npos; ++at) {
      const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
      evals[z] += line.substr(0, line.rfind(" | ")) + "\n";
    }
  }
  EXPECT_EQ(std::count(evals[1].begin(), evals[1].end(), '\n'), 2) << evals[1];
  EXPECT_EQ(evals[0], evals[1]);
  for (const char* section : {"params", "adam_m", "adam_v", "ema"}) {
    const auto a = checkpoint_floats(checkpoint_path(checkpoint_dir(out[0]), 6), section),
               b = checkpoint_floats(checkpoint_path(checkpoint_dir(out[1]), 6), section);
    ASSERT_EQ(a.size(), b.size()) << section;
    ASSERT_GT(a.size(), 0u) << section;
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << section << ": ZeRO-1 changed it";
  }
  EXPECT_NE(checkpoint_floats(checkpoint_path(checkpoint_dir(out[1]), 6), "ema"),
            checkpoint_floats(checkpoint_path(checkpoint_dir(out[1]), 6), "params"));
}

// Elastic resume: a run checkpointed on 2 ranks continues on 1 (and one from 1 on 2) with the
// same global batch and data position, so its loss curve is the uninterrupted run's (within
// the fp32 summation-order differences of the test above). A constant learning rate, so that
// the first part's shorter --max-steps does not change its schedule.
TEST(MpiE2E, ResumeOnAnotherNumberOfRanksContinuesTheSameCurve) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string args = " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 "
                           "--micro-batch-size 4 --lr 1e-3 --warmup-steps 0 --min-lr-ratio 1 --log-every 1 --eval-every 0 --ckpt-every 2 "
                           "--metrics-file ";
  // Chunks of 1000 (of ~22k parameters): the 2-rank shards interleave, so a resume from or
  // to them re-shards through the whole layout.
  const std::string one = std::string("FT_SHARD_CHUNK=1000 OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY + args;
  const std::string two = std::string("FT_SHARD_CHUNK=1000 ") + kMpirun + FITTRAIN_BINARY + args;
  const std::string ref = temp_dir("mpi_elastic_ref");
  ASSERT_EQ(run_command(one + ref + "/m.jsonl --max-steps 8 --results-dir " + ref).status, 0);
  const auto want = step_losses(ref + "/m.jsonl");
  ASSERT_EQ(want.size(), 8u);
  // 2 -> 1 and 1 -> 2 ranks, and the same with the two ranks' optimizer state sharded
  // (ZeRO-1): the checkpoint holds the whole layout, so a resume re-shards it.
  for (const char* zero : {"0", "1"}) {
    for (const bool two_first : {true, false}) {
      const std::string label = std::string(two_first ? "2 -> 1" : "1 -> 2") + " ranks, ZeRO stage " + zero;
      const std::string d = temp_dir(std::string(two_first ? "mpi_elastic_2to1_z" : "mpi_elastic_1to2_z") + zero);
      const std::string two_z = two + d + "/m.jsonl --zero-stage " + zero;
      const std::string one_d = one + d + "/m.jsonl";
      CmdResult a = run_command((two_first ? two_z : one_d) + " --max-steps 4 --results-dir " + d);
      ASSERT_EQ(a.status, 0) << a.output;
      CmdResult b = run_command((two_first ? one_d : two_z) + " --max-steps 8 --resume auto --results-dir " + d);
      ASSERT_EQ(b.status, 0) << b.output;
      EXPECT_NE(b.output.find("resumed    from"), std::string::npos) << b.output;
      EXPECT_NE(b.output.find(two_first ? "x 1 rank" : "x 2 rank"), std::string::npos) << b.output;
      const auto got = step_losses(d + "/m.jsonl");
      ASSERT_EQ(got.size(), 8u) << read_file(d + "/m.jsonl");
      double worst = 0;
      for (int64_t step = 1; step <= 8; ++step) {
        EXPECT_NEAR(got.at(step), want.at(step), 1e-5 * std::fabs(want.at(step))) << label << ", step " << step;
        worst = std::max(worst, std::fabs(got.at(step) - want.at(step)) / std::fabs(want.at(step)));
      }
      std::printf("%s: largest relative loss difference over 8 steps %.3g\n", label.c_str(), worst);
    }
  }
}

// A ZeRO-1 checkpoint streams through blocks: rank 0 writes each section's gathered blocks of
// whole chunks as they land, and every rank uploads its pieces of each 4 MiB block it reads.
// With 4.8 M parameters (more than one 4 Mi-element block, and many read blocks) a run on 2
// ranks resumed at step 2 is, bit for bit, the run that went on: the same losses and the same
// weights and moments at step 4. A block cut in the wrong place or a piece put at the wrong
// offset breaks it (as GPU_DataParallel.AResumedZeroRunIsTheRunThatWentOn does on GPUs).
TEST(MpiE2E, AResumedZeroRunOfSeveralBlocksIsTheRunThatWentOn) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string two = std::string("FT_SHARD_CHUNK=200000 ") + kMpirun + FITTRAIN_BINARY +
                          " train --n-layer 6 --n-head 4 --n-embd 256 --seq-len 16 --global-batch-size 4 "
                          "--micro-batch-size 2 --max-steps 4 --lr 1e-3 --warmup-steps 0 --log-every 1 --eval-every 0 "
                          "--ckpt-every 2 --zero-stage 1 --metrics-file ";
  const std::string whole = temp_dir("mpi_zero_blocks_whole"), resumed = temp_dir("mpi_zero_blocks_resumed");
  CmdResult a = run_command(two + whole + "/m.jsonl --results-dir " + whole);
  ASSERT_EQ(a.status, 0) << a.output;
  CmdResult b = run_command(two + resumed + "/m.jsonl --resume " + checkpoint_path(checkpoint_dir(whole), 2) +
                            " --results-dir " + resumed);
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("resumed    from"), std::string::npos) << b.output;
  expect_resumed_is_the_run_that_went_on(whole + "/m.jsonl", resumed + "/m.jsonl", {3, 4},
                                         checkpoint_path(checkpoint_dir(whole), 4),
                                         checkpoint_path(checkpoint_dir(resumed), 4), {"params", "adam_m", "adam_v"},
                                         size_t{16} << 20);  // fp32: more than 4 Mi elements
}

// Memory taken on one rank between planning and allocation (FT_TEST_CPU_MEMORY_AFTER_PLAN: rank
// 1's CPU backend then has 400 MiB, less than the 462 MiB the plan allocates): every rank
// learns of it, gives its arena back and re-plans together (one plan: the smaller micro-batch
// rank 1's budget allows: 400 MiB less the 256 MiB margin, halved as both ranks share this
// machine's memory: 72 MiB), and the run trains its global
// batch of 64. Before, rank 1 re-planned alone and waited in collectives the others never made.
TEST(MpiE2E, MemoryTakenOnOneRankBeforeAllocationReplansEveryRank) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_replan_at_allocation");
  CmdResult r = run_command("FT_TEST_CPU_MEMORY_AFTER_PLAN=" + std::to_string(400ull << 20) + "@1 " + kMpirun +
                            FITTRAIN_BINARY + " train --n-layer 2 --n-head 2 --n-embd 128 --seq-len 512"
                            " --global-batch-size 64 --max-steps 1 --eval-every 0 --eval-batches 1 --log-every 1"
                            " --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("micro-batch 32 x 1 accumulation x 2 rank(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("re-plan    another rank ran out of memory allocating the plan; every rank re-plans"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: re-plan    cpu backend: cannot allocate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("re-planning for a budget of 72.00 MiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shared by the 2 ranks on this machine"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("re-plan    micro-batch 32 -> "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step      1/1"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(d), 1))) << r.output;
}

// Out of memory on one rank inside a step (FT_TEST_OOM_AT=K@R fails rank R once, right after
// its backward's first gradient report): that rank still queues the step's reductions
// (GradReducer::drain) and sends a NaN loss with its vote, so every rank skips the update,
// saves step K-1 and re-plans below the plan that ran out; the run then trains all 6 steps of
// its global batch. K = 1 is a run's first step (its reductions wait until the ranks agree
// that every backward completed), K = 3 a step replayed from the one before; rank 1 fails, or
// rank 0 (whose checkpoint the others resume from); with and without ZeRO-1. A larger model
// with 1 MiB buckets under a memory limit (micro-batch 1 x 8 accumulated) has rank 1 fail in
// its last backward after the others queued their first reduction group: its replay queues
// that group and the rest. Each step's loss is
// the undisturbed run's up to the summation order of the smaller micro-batches (1e-4
// relative, as Replan.OutOfMemoryMidRunSavesReplansAndKeepsTheGlobalBatch).
TEST(MpiE2E, OutOfMemoryOnOneRankMidStepReplansEveryRank) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string common = " train --n-head 2 --seq-len 32 --global-batch-size 16 --max-steps 6 --lr 1e-3 "
                             "--warmup-steps 0 --min-lr-ratio 1 --log-every 1 --eval-every 0 --ckpt-every 0 ";
  struct Case {
    std::string env, model;
    const char* zero;
    std::vector<std::pair<int, int>> failures;  // (step, rank)
  };
  const std::string tiny = "--n-layer 2 --n-embd 32 ";
  const Case cases[] = {
      {"", tiny, "0", {{1, 1}, {3, 1}, {3, 0}}},
      {"", tiny, "1", {{1, 1}, {3, 1}, {3, 0}}},
      {"FT_BUCKET_MB=1 ", "--n-layer 4 --n-embd 128 --memory-limit 15MiB ", "0", {{3, 1}}},
  };
  for (const Case& c : cases) {
    const std::string args = common + c.model + "--zero-stage " + c.zero + " --metrics-file ";
    const std::string ref = temp_dir("mpi_oom_ref");
    CmdResult a = run_command(c.env + timed_mpirun(120) + FITTRAIN_BINARY + args + ref + "/m.jsonl --results-dir " + ref);
    ASSERT_EQ(a.status, 0) << a.output;
    const auto want = step_losses(ref + "/m.jsonl");
    ASSERT_EQ(want.size(), 6u);
    for (const auto& [k, rank] : c.failures) {
      const std::string label = c.model + "ZeRO stage " + c.zero + ", out of memory at step " + std::to_string(k) +
                                " on rank " + std::to_string(rank);
      const std::string d = temp_dir("mpi_oom");
      CmdResult r = run_command(c.env + "FT_TEST_OOM_AT=" + std::to_string(k) + "@" + std::to_string(rank) + " " +
                                timed_mpirun(120) + FITTRAIN_BINARY + args + d + "/m.jsonl --results-dir " + d);
      ASSERT_EQ(r.status, 0) << label << "\n" << r.output;
      EXPECT_NE(r.output.find("re-plan    out of memory during step " + std::to_string(k) + " on 1 of 2 ranks: " +
                              "every rank saves step " + std::to_string(k - 1) + " and re-plans"),
                std::string::npos) << label << "\n" << r.output;
      if (rank == 1)  // rank 0's own cause is in the line above
        EXPECT_NE(r.output.find("rank 1: re-plan    out of device memory during step " + std::to_string(k) +
                                " (injected by FT_TEST_OOM_AT"), std::string::npos) << label << "\n" << r.output;
      // The arena's bytes ("total (arena)  1.88 MiB  1970176"): the plan after the re-plan is smaller.
      auto arena_bytes = [](const std::string& out, size_t from) {
        const size_t at = out.find("total (arena)", from);
        if (at == std::string::npos) return 0ll;
        std::istringstream line(out.substr(at, out.find('\n', at) - at));
        std::string word, last;
        while (line >> word) last = word;
        return std::stoll(last);
      };
      const size_t replanned_at = r.output.find("re-plan    out of memory mid-run");
      ASSERT_NE(replanned_at, std::string::npos) << label << "\n" << r.output;
      EXPECT_LT(arena_bytes(r.output, replanned_at), arena_bytes(a.output, 0)) << label << "\n" << r.output;
      EXPECT_GT(arena_bytes(r.output, replanned_at), 0) << label << "\n" << r.output;
      const auto got = step_losses(d + "/m.jsonl");
      ASSERT_EQ(got.size(), 6u) << label << "\n" << read_file(d + "/m.jsonl");
      for (int64_t step = 1; step <= 6; ++step)
        EXPECT_NEAR(got.at(step), want.at(step), 1e-4 * std::fabs(want.at(step))) << label << ", step " << step;
      EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(d), 6))) << label << "\n" << r.output;
    }
  }
}

// Out of memory on one rank in an evaluation (FT_TEST_EVAL_OOM_AT=2@1: rank 1's first loss
// batch of step 2's evaluation, once): that rank keeps the failure and still joins the
// evaluation's sums (EvalShard::part), so both ranks learn of it there, save step 2 and
// re-plan together; the run evaluates step 2 again, then trains its 6 steps as an undisturbed
// run does (1e-4).
TEST(MpiE2E, OutOfMemoryOnOneRankInAnEvaluationReplansEveryRank) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string args = " train --n-layer 2 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 16 "
                           "--max-steps 6 --lr 1e-3 --warmup-steps 0 --min-lr-ratio 1 --log-every 1 --eval-every 2 "
                           "--eval-batches 4 --ckpt-every 0 --metrics-file ";
  const std::string ref = temp_dir("mpi_eval_oom_ref");
  CmdResult a = run_command(timed_mpirun(120) + FITTRAIN_BINARY + args + ref + "/m.jsonl --results-dir " + ref);
  ASSERT_EQ(a.status, 0) << a.output;
  const auto want = step_losses(ref + "/m.jsonl");
  ASSERT_EQ(want.size(), 6u);
  const std::string d = temp_dir("mpi_eval_oom");
  CmdResult r = run_command("FT_TEST_EVAL_OOM_AT=2@1 " + timed_mpirun(120) + FITTRAIN_BINARY + args + d +
                            "/m.jsonl --results-dir " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: re-plan    out of device memory in its part of the evaluation (injected by "
                          "FT_TEST_EVAL_OOM_AT"), std::string::npos) << r.output;
  expect_evaluation_replanned_and_repeated(r.output, 2, 6);  // step 2 evaluated again before step 3
  const auto got = step_losses(d + "/m.jsonl");
  ASSERT_EQ(got.size(), 6u) << read_file(d + "/m.jsonl");
  for (int64_t step = 1; step <= 6; ++step)
    EXPECT_NEAR(got.at(step), want.at(step), 1e-4 * std::fabs(want.at(step))) << "step " << step;
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(checkpoint_dir(d), 2))) << r.output;
}

// The numbers of `fittrain test`'s line ("loss 2.1234 | ssim 0.123 | ...") by name.
std::map<std::string, double> test_numbers(const std::string& out) {
  std::map<std::string, double> m;
  const size_t at = out.find("test       ");
  if (at == std::string::npos) return m;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  std::istringstream words(line.substr(line.find(": loss ") + 2));
  std::string name, value;
  while (words >> name >> value) {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end && *end == '\0') m[name] = v;
    std::string bar;
    if (!(words >> bar) || bar != "|") break;
  }
  return m;
}

// Ranks whose memory leaves them different evaluation batches still cut an evaluation into
// the same batches (the smallest), or their parts would overlap and leave gaps. Here the
// ranks are given different --eval-batch-size (MPMD: one mpirun, two commands): 4 on rank 0,
// 2 on rank 1; both evaluate in batches of 2, as one process told 2 does.
TEST(MpiE2E, RanksAgreeOnTheEvaluationBatch) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_eval_batch");
  const std::string one = std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY;
  CmdResult t = run_command(one + " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8"
                            " --max-steps 2 --eval-every 0 --log-every 2 --results-dir " + d);
  ASSERT_EQ(t.status, 0) << t.output;
  const std::string test = " test --eval-batches 5 --results-dir " + d + " --eval-batch-size ";
  CmdResult alone = run_command(one + test + "2");
  ASSERT_EQ(alone.status, 0) << alone.output;
  const std::string mpmd = std::string(kMpirun).substr(0, std::string(kMpirun).find("-np 2"));
  CmdResult two = run_command(mpmd + "-np 1 " + FITTRAIN_BINARY + test + "4 : -np 1 " + FITTRAIN_BINARY + test + "2");
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find(", 2 at a time, split over 2 ranks"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("split over 2 ranks"), std::string::npos) << two.output;
  const auto a = test_numbers(alone.output), b = test_numbers(two.output);
  ASSERT_TRUE(a.count("loss") && b.count("loss")) << alone.output << two.output;
  EXPECT_NEAR(a.at("loss"), b.at("loss"), 1.01e-4) << alone.output << two.output;
}

// A training evaluation covers --eval-batches batches of the global batch whatever the number
// of ranks: 2 ranks report the val loss one process does. Each rank's evaluation batch is
// capped by its share of the global batch, so before session 40 two ranks evaluated half the
// samples (5.5471 against 5.5423 here).
TEST(MpiE2E, ATrainingEvaluationIsTheSameOnAnyNumberOfRanks) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_eval_same");
  const std::string flags = " train --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8 "
                            "--max-steps 2 --eval-every 2 --eval-batches 3 --log-every 2 --results-dir ";
  CmdResult one = run_command(std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY + flags + d + "/one");
  ASSERT_EQ(one.status, 0) << one.output;
  CmdResult two = run_command(std::string(kMpirun) + FITTRAIN_BINARY + flags + d + "/two");
  ASSERT_EQ(two.status, 0) << two.output;
  auto val_loss = [](const std::string& out) {
    const size_t at = out.find("val loss ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 9));
  };
  ASSERT_GT(val_loss(one.output), 0) << one.output;
  EXPECT_NEAR(val_loss(one.output), val_loss(two.output), 2e-4) << one.output << two.output;
}

// Evaluation split over the ranks (train/task.h, EvalShard): `fittrain test` of one checkpoint
// under mpirun -np 2 takes half of the batches, images or users on each rank and adds their
// sums, and reports what one process reports for every task's metrics (the language model's
// loss; the DiT's loss and its reconstructions' RMSE, PSNR and SSIM; the chat model's loss,
// its BLEU-4 answered in parts; the recommender's sampled and full HR/NDCG@10),
// to the printed digits (within one unit of the last: the sums are
// added in another order).
TEST(MpiE2E, EvaluationSplitOverRanksReportsOneProcessMetrics) {
  if (std::string why = mpirun_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string d = temp_dir("mpi_eval_split");
  const std::string one = std::string("OMP_NUM_THREADS=1 ") + FITTRAIN_BINARY;
  auto ok = [](const CmdResult& r) { return r.status == 0; };
  CmdResult prep = run_command(one + " prepare --synthetic eit --out " + d + "/eit --train 32 --valid 12 --test 12 --image-size 32");
  ASSERT_TRUE(ok(prep)) << prep.output;
  prep = run_command(one + " prepare --synthetic movielens --users 200 --items 300 --out " + d + "/ml");
  ASSERT_TRUE(ok(prep)) << prep.output;
  {  // prompt/response pairs: "say: w1 w2" -> "w1 w2"
    std::ofstream f(d + "/pairs.jsonl");
    const char* words[] = {"red", "blue", "cat", "dog", "sun", "moon"};
    for (int i = 0; i < 240; ++i) {
      const std::string w = std::string(words[i % 6]) + " " + words[(i / 6) % 6];
      f << "{\"prompt\": \"say: " << w << "\\n\", \"response\": \"" << w << "\"}\n";
    }
  }
  prep = run_command(one + " prepare --input " + d + "/pairs.jsonl --out " + d + "/pairs --seq-len 32");
  ASSERT_TRUE(ok(prep)) << prep.output;
  struct Case {
    std::string name, model, data;  // model: train's flags alone; data: both commands'
    std::vector<std::string> metrics;
  };
  const std::vector<Case> cases = {
      {"lm", " --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8", " --eval-batch-size 4 --eval-batches 5",
       {"loss"}},
      {"diffusion", " --model dit-tiny --device cpu --global-batch-size 8",
       " --task diffusion --data-path " + d + "/eit --eval-images 7", {"loss", "rmse", "psnr", "ssim"}},
      {"chat", " --n-layer 1 --n-head 2 --n-embd 32 --seq-len 32 --global-batch-size 8",
       // BLEU's split is exact (Bleu.CountsOfPartsScoreTheWhole), but greedy answers of an
       // untrained model, generated in batches of another size, could flip a near-tied token
       " --task chat --data-path " + d + "/pairs --bleu-samples 9 --eval-max-new-tokens 6", {"loss"}},
      {"rec", " --model gpt2rec --seq-len 12 --n-layer 1 --n-embd 32 --negatives 4 --global-batch-size 16",
       " --task rec --data-path " + d + "/ml", {"loss", "hr10", "ndcg10", "full_hr10", "full_ndcg10"}},
  };
  for (const Case& c : cases) {
    const std::string dir = d + "/" + c.name;
    CmdResult t = run_command(one + " train" + c.model + c.data + " --max-steps 3 --lr 1e-3 --warmup-steps 0"
                              " --eval-every 0 --log-every 3 --results-dir " + dir);
    ASSERT_TRUE(ok(t)) << c.name << "\n" << t.output;
    const std::string test = " test" + c.data + " --results-dir " + dir;
    CmdResult alone = run_command(one + test);
    ASSERT_TRUE(ok(alone)) << c.name << "\n" << alone.output;
    CmdResult two = run_command(std::string(kMpirun) + FITTRAIN_BINARY + test);
    ASSERT_TRUE(ok(two)) << c.name << "\n" << two.output;
    EXPECT_EQ(alone.output.find("split over"), std::string::npos) << alone.output;
    EXPECT_NE(two.output.find("split over 2 ranks"), std::string::npos) << c.name << "\n" << two.output;
    const auto a = test_numbers(alone.output), b = test_numbers(two.output);
    for (const std::string& m : c.metrics) {
      ASSERT_TRUE(a.count(m) && b.count(m)) << c.name << " " << m << "\n" << alone.output << two.output;
      const double unit = m == "loss" ? 1e-4 : 1e-3;  // printed with %.4f and %.3f
      EXPECT_NEAR(a.at(m), b.at(m), 1.01 * unit) << c.name << " " << m << "\n" << alone.output << two.output;
    }
    std::printf("%s: %s", c.name.c_str(), two.output.substr(two.output.find("test       ")).c_str());
  }
}

}  // namespace
}  // namespace ft
