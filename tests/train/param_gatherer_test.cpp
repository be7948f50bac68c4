// ParamGatherer: the order of ZeRO-1's chunk updates and gathers, and when the forward's names
// make the compute stream wait, with a communicator that records the gathers (the waits
// themselves are stream events: exercised on GPUs by GPU_DataParallel.*, bitwise against
// gathering everything first).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "train/param_gatherer.h"

namespace ft {
namespace {

// Records "update c" and "gather c" in the order they are queued.
class GatherLog final : public Communicator {
 public:
  GatherLog(const float* base, std::vector<std::string>& log, int64_t chunk) : base_(base), log_(log), chunk_(chunk) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string describe() const override { return "recording"; }
  void all_reduce_sum(Tensor, StreamHandle) override {}
  void all_reduce_group(std::span<const Tensor>, StreamHandle, CommLane) override {}
  void reduce_scatter_group(std::span<const Tensor>, StreamHandle, CommLane) override {}
  void all_gather_group(std::span<const Tensor> chunks, StreamHandle) override {
    std::string line = "gather";
    for (const Tensor& c : chunks) {
      EXPECT_EQ(c.numel(), chunk_);
      line += " " + std::to_string((static_cast<const float*>(c.data) - base_) / chunk_);
    }
    log_.push_back(line);
  }
  void all_gather(Tensor, Tensor, StreamHandle) override {}
  void all_reduce_sum(std::span<double>) override {}
  int64_t all_reduce_min(int64_t v) override { return v; }
  void broadcast(Tensor, int) override {}
  void barrier() override {}

 private:
  const float* base_;
  std::vector<std::string>& log_;
  int64_t chunk_;
};

struct Fixture {
  explicit Fixture(int64_t group_chunks = 1)
      : gatherer(*be, comm, Tensor(params.data(), DType::f32, {64}), shard, StreamHandle{}, group_chunks) {}
  std::unique_ptr<Backend> be = make_cpu_backend();
  OptimizerShard shard = shard_layout(60, 2, 0, 16);  // chunks of 16: [0, 16) ... [48, 64)
  std::vector<float> params = std::vector<float>(64, 0.f);
  std::vector<std::string> log;
  GatherLog comm{params.data(), log, 16};
  ParamGatherer gatherer;
  void update() {
    gatherer.run([&](int64_t c0, int64_t c1, StreamHandle) {
      std::string line = "update";
      for (int64_t c = c0; c < c1; ++c) line += " " + std::to_string(c);
      log.push_back(line);
    });
  }
  void name(int64_t offset, int64_t count) {
    const ParamRange r{offset, count};
    gatherer.on_needed(std::span<const ParamRange>(&r, 1));
  }
};

TEST(ParamGatherer, GathersEachChunkRightAfterItsUpdate) {
  Fixture f;
  ASSERT_EQ(f.shard.chunks, 4);
  f.update();
  EXPECT_EQ(f.log, (std::vector<std::string>{"update 0", "gather 0", "update 1", "gather 1", "update 2", "gather 2",
                                             "update 3", "gather 3"}));
}

TEST(ParamGatherer, GroupsChunksIntoOneGatherAndWaitsByGroup) {
  Fixture f(3);  // groups {0, 1, 2} and {3}
  f.name(0, 60);
  f.update();
  EXPECT_EQ(f.log,
            (std::vector<std::string>{"update 0", "update 1", "update 2", "gather 0 1 2", "update 3", "gather 3"}));
  f.name(0, 8);  // chunk 0: its group, 0
  EXPECT_EQ(f.gatherer.waited_upto(), 0);
  f.name(40, 10);  // chunks 2-3: group 1, the last
  EXPECT_EQ(f.gatherer.waited_upto(), 1);
  EXPECT_FALSE(f.gatherer.in_flight());
}

TEST(ParamGatherer, TheForwardWaitsOnlyForTheChunksItNamesOnceItNamedEverything) {
  Fixture f;
  // The first forward (nothing in flight) names every parameter: learned.
  f.name(0, 20);
  f.name(20, 30);
  f.name(50, 10);
  f.update();
  EXPECT_TRUE(f.gatherer.in_flight());
  f.name(0, 20);  // chunks 0-1
  EXPECT_EQ(f.gatherer.waited_upto(), 1);
  f.name(4, 4);  // already waited for
  EXPECT_EQ(f.gatherer.waited_upto(), 1);
  f.name(20, 30);  // up to chunk 3 (60 elements: the last chunk holds 12 and 4 of padding)
  EXPECT_EQ(f.gatherer.waited_upto(), 3);
  EXPECT_FALSE(f.gatherer.in_flight());  // every chunk waited for
}

TEST(ParamGatherer, FollowsTheOrderInWhichTheForwardFirstNamesTheChunks) {
  Fixture f(2);
  f.name(48, 12);  // chunk 3 first (like GPT-2's embeddings... anywhere in the layout)
  f.name(0, 20);   // chunks 0, 1
  f.name(20, 28);  // chunks 1, 2, 3: everything named, order 3 0 1 2
  f.update();
  EXPECT_EQ(f.log, (std::vector<std::string>{"update 3", "update 0", "gather 3 0", "update 1", "update 2",
                                             "gather 1 2"}));
  f.name(48, 12);
  EXPECT_EQ(f.gatherer.waited_upto(), 0);  // chunk 3 is in the first group
  f.name(0, 4);
  EXPECT_EQ(f.gatherer.waited_upto(), 0);  // so is chunk 0
  f.name(20, 4);  // chunk 1: the second group
  EXPECT_EQ(f.gatherer.waited_upto(), 1);
}

TEST(ParamGatherer, UntilTheNamesCoverEveryParameterTheComputeStreamWaitsForAll) {
  Fixture f;
  f.name(0, 20);
  f.name(50, 10);  // [20, 50) never named: a model that reads parameters it does not name
  f.update();
  EXPECT_FALSE(f.gatherer.in_flight()) << "waited for everything right after the update";
  f.name(20, 10);
  f.name(30, 20);  // now covered (merged with its neighbours)
  f.update();
  EXPECT_TRUE(f.gatherer.in_flight());
  f.name(0, 8);
  EXPECT_EQ(f.gatherer.waited_upto(), 0);
  // The next round waits for what this round's forward did not.
  f.update();
  EXPECT_TRUE(f.gatherer.in_flight());
  EXPECT_EQ(f.gatherer.waited_upto(), -1);
}

}  // namespace
}  // namespace ft
