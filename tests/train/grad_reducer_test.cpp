// GradReducer: which reductions it queues for the ranges a model reports, with a
// communicator that records them (the transports themselves are tested under mpirun and on
// GPUs).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "train/grad_reducer.h"

namespace ft {
namespace {

struct Recorded {
  int64_t offset, count;
  bool scatter;  // reduce-scatter (ZeRO-1) or all-reduce
  int group;
};

class RecordingComm final : public Communicator {
 public:
  explicit RecordingComm(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string describe() const override { return "recording"; }
  void all_reduce_sum(Tensor, StreamHandle) override { ADD_FAILURE() << "unexpected all_reduce_sum"; }
  void all_reduce_group(std::span<const Tensor> parts, StreamHandle, CommLane lane) override {
    record(parts, false, lane);
  }
  void reduce_scatter_group(std::span<const Tensor> chunks, StreamHandle, CommLane lane) override {
    record(chunks, true, lane);
  }
  void all_gather_group(std::span<const Tensor>, StreamHandle) override { ADD_FAILURE() << "unexpected gather"; }
  void all_gather(Tensor, Tensor, StreamHandle) override {}
  void all_reduce_sum(std::span<double>) override {}
  int64_t all_reduce_min(int64_t v) override { return v; }
  void broadcast(Tensor, int) override {}
  void barrier() override {}
  std::vector<Recorded> got;
  std::vector<CommLane> lanes;  // each group's
  int groups = 0;
  void forget() {
    got.clear();
    lanes.clear();
    groups = 0;
  }

 private:
  void record(std::span<const Tensor> parts, bool scatter, CommLane lane) {
    for (const Tensor& p : parts) got.push_back({static_cast<const float*>(p.data) - base_, p.numel(), scatter, groups});
    lanes.push_back(lane);
    ++groups;
  }
  const float* base_;
};

// A [kind][layer] layout like GPT-2's: two kinds of 10 elements per layer, 3 layers, then a
// final 4-element parameter: kind a at [0, 30), kind b at [30, 60), final at [60, 64).
std::vector<ParamRange> layer(int l) { return {{10 * l, 10}, {30 + 10 * l, 10}}; }

// The backward's reports of one step: the final parameter, then the layers from the last.
void backward(const GradReadyFn& hook) {
  const ParamRange fin[1] = {{60, 4}};
  hook(fin);
  for (int l = 2; l >= 0; --l) hook(layer(l));
}

// A reducer of 64 gradients (all-reduce, or ZeRO-1 over `shard`) and the communicator that
// records what it queues.
struct Reducing {
  explicit Reducing(size_t bucket_bytes, size_t min_flush_bytes = GradReducer::kMinFlushBytes,
                    const OptimizerShard* shard = nullptr)
      : red(*be, comm, Tensor(g.data(), DType::f32, {64}), shard, bucket_bytes, min_flush_bytes) {}
  // A reducer's first step holds every reduction until finish() (nothing to replay yet if a
  // rank's backward fails; GradReducer::drain): run one, then forget what it queued.
  void first_step() {
    backward(red.hook());
    red.finish();
    comm.forget();
  }
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> g = std::vector<float>(64, 0.0f);
  RecordingComm comm{g.data()};
  GradReducer red;
};

std::vector<std::tuple<int64_t, int64_t, bool, int>> queued(const RecordingComm& comm) {
  std::vector<std::tuple<int64_t, int64_t, bool, int>> out;
  for (const Recorded& r : comm.got) out.emplace_back(r.offset, r.count, r.scatter, r.group);
  return out;
}

TEST(GradReducer, CoalescesLayersIntoBucketsAndReducesEverythingOnce) {
  // A bucket of 40 elements' bytes: two layers (and the final parameter) per group.
  Reducing f(40 * sizeof(float));
  f.first_step();
  GradReadyFn hook = f.red.hook();
  const ParamRange fin[1] = {{60, 4}};
  hook(fin);
  for (int l = 2; l >= 0; --l) hook(layer(l));
  f.red.finish();
  // Group 0: final + layer 2 (24 elements, below the bucket) + layer 1, coalesced: kind a's
  // layers 1-2, kind b's layers 1-2 joined with the final parameter right after them.
  ASSERT_EQ(f.comm.groups, 2);
  std::vector<std::pair<int64_t, int64_t>> g0, g1;
  for (const Recorded& r : f.comm.got) {
    EXPECT_FALSE(r.scatter);
    (r.group == 0 ? g0 : g1).emplace_back(r.offset, r.count);
  }
  EXPECT_EQ(g0, (std::vector<std::pair<int64_t, int64_t>>{{10, 20}, {40, 24}}));
  EXPECT_EQ(g1, (std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {30, 10}}));
}

TEST(GradReducer, NearTheEndEachReportGoesAtOnceAndTheLastFromInsideTheBackward) {
  // Buckets of 40 elements; near the end, reports of 10 or more go at once.
  Reducing f(40 * sizeof(float), 10 * sizeof(float));
  f.first_step();
  GradReadyFn hook = f.red.hook();
  const ParamRange fin[1] = {{60, 4}};
  hook(fin);  // 4 pending, 60 still to come: wait
  EXPECT_EQ(f.comm.groups, 0);
  hook(layer(2));  // 24 pending, 40 to come (fits in a bucket): go
  EXPECT_EQ(f.comm.groups, 1);
  hook(layer(1));  // 20 pending, 20 to come: go
  EXPECT_EQ(f.comm.groups, 2);
  hook(layer(0));  // the last report: reduced before the backward returns, not in finish()
  EXPECT_EQ(f.comm.groups, 3);
  f.red.finish();
  EXPECT_EQ(f.comm.groups, 3);
  std::vector<std::tuple<int64_t, int64_t, int>> got;
  for (const Recorded& r : f.comm.got) got.emplace_back(r.offset, r.count, r.group);
  EXPECT_EQ(got, (std::vector<std::tuple<int64_t, int64_t, int>>{
                     {20, 10, 0}, {50, 14, 0}, {10, 10, 1}, {40, 10, 1}, {0, 10, 2}, {30, 10, 2}}));
}

// A bucket that fills while more than a bucket is still to come has the backward's time to
// spare (background lane: NCCL may run it on fewer SMs); the rest is waited for soon.
TEST(GradReducer, OnlyBucketsWithMoreThanABucketStillToComeGoInTheBackground) {
  // Buckets of 20 elements; near the end, reports of 10 or more go at once.
  Reducing f(20 * sizeof(float), 10 * sizeof(float));
  f.first_step();
  backward(f.red.hook());  // final + layer 2: 24 (40 to come); layer 1: 20 (20 to come); layer 0: the last
  f.red.finish();
  EXPECT_EQ(f.comm.groups, 3);
  EXPECT_EQ(f.comm.lanes, (std::vector<CommLane>{CommLane::background, CommLane::foreground, CommLane::foreground}));
}

TEST(GradReducer, ZeroOneReduceScattersEachChunkOnceItIsComplete) {
  // Chunks of 16 over 2 ranks: [0, 16), [16, 32), [32, 48), [48, 64).
  const OptimizerShard shard = shard_layout(64, 2, 0, 16);
  ASSERT_EQ(shard.chunks, 4);
  ASSERT_EQ(shard.chunk, 16);
  // Buckets of 32 elements; near the end every report of 16 or more goes at once.
  Reducing f(32 * sizeof(float), 16 * sizeof(float), &shard);
  f.first_step();
  GradReadyFn hook = f.red.hook();
  const ParamRange fin[1] = {{60, 4}};
  hook(fin);  // chunk 3 still misses [48, 60)
  EXPECT_EQ(f.comm.groups, 0);
  hook(layer(2));  // [20, 30) and [50, 60): chunk 3 complete (16 ready, 40 to come: wait)
  EXPECT_EQ(f.comm.groups, 0);
  hook(layer(1));  // [10, 20), [40, 50): no chunk completes; 20 to come, so chunk 3 goes
  ASSERT_EQ(f.comm.groups, 1);
  hook(layer(0));  // [0, 10), [30, 40): chunks 0, 1 ([16, 32) waited for [30, 32)) and 2
  ASSERT_EQ(f.comm.groups, 2);
  f.red.finish();
  std::vector<std::tuple<int64_t, int64_t, int>> got;
  for (const Recorded& r : f.comm.got) {
    EXPECT_TRUE(r.scatter);
    got.emplace_back(r.offset, r.count, r.group);
  }
  EXPECT_EQ(got, (std::vector<std::tuple<int64_t, int64_t, int>>{{48, 16, 0}, {0, 16, 1}, {16, 16, 1}, {32, 16, 1}}));
}

// The first step queues nothing until finish(), then all of it (one group): if one rank's
// backward fails, the ranks can still agree before any reduction (train/trainer.cpp).
TEST(GradReducer, TheFirstStepHoldsItsReductionsUntilFinish) {
  Reducing f(40 * sizeof(float), 10 * sizeof(float));
  GradReadyFn hook = f.red.hook();
  EXPECT_TRUE(f.red.holding());
  backward(hook);
  EXPECT_EQ(f.comm.groups, 0);  // the next steps would have queued 3 groups by now
  f.red.finish();
  EXPECT_EQ(queued(f.comm), (std::vector<std::tuple<int64_t, int64_t, bool, int>>{{0, 64, false, 0}}));
  (void)f.red.hook();
  EXPECT_FALSE(f.red.holding());
}

// A rank whose backward fails part-way (out of memory) drains: it queues exactly the
// reductions, in the same groups, that the other ranks queue for a whole backward; also when
// it failed before the last micro-batch's backward began (no hook() yet). A step that
// reported differently from the last one cannot be replayed faithfully.
TEST(GradReducer, ARankWhoseBackwardFailedQueuesWhatTheOthersQueue) {
  for (const bool zero : {false, true}) {
    SCOPED_TRACE(zero ? "ZeRO-1" : "all-reduce");
    const OptimizerShard shard = shard_layout(64, 2, 0, 16);
    Reducing f(32 * sizeof(float), 10 * sizeof(float), zero ? &shard : nullptr);
    f.first_step();
    backward(f.red.hook());
    f.red.finish();
    const auto whole = queued(f.comm);
    ASSERT_GE(f.comm.groups, 2);
    for (int reached = 0; reached <= 4; ++reached) {  // reports made before the failure
      SCOPED_TRACE("failed after " + std::to_string(reached) + " reports");
      f.comm.forget();
      if (reached > 0) {
        GradReadyFn hook = f.red.hook();
        const ParamRange fin[1] = {{60, 4}};
        hook(fin);
        for (int l = 2; l > 3 - reached; --l) hook(layer(l));
      }
      EXPECT_TRUE(f.red.drain());
      f.red.finish();
      EXPECT_EQ(queued(f.comm), whole);
    }
    GradReadyFn hook = f.red.hook();
    hook(layer(2));  // not what the last step reported first
    EXPECT_FALSE(f.red.drain());
  }
}

TEST(GradReducer, ZeroOneRefusesAChunkReportedTwice) {
  const OptimizerShard shard = shard_layout(64, 2, 0, 16);
  Reducing f(1 << 20, GradReducer::kMinFlushBytes, &shard);
  GradReadyFn hook = f.red.hook();
  hook(layer(0));
  EXPECT_THROW(hook(layer(0)), InternalError);
}

TEST(GradReducer, AModelThatReportsNothingGetsTheWholeBufferReduced) {
  Reducing f(1 << 20);
  (void)f.red.hook();
  f.red.finish();
  ASSERT_EQ(f.comm.got.size(), 1u);
  EXPECT_EQ(f.comm.got[0].offset, 0);
  EXPECT_EQ(f.comm.got[0].count, 64);
}

TEST(GradReducer, AGradientReportedTwiceOrNeverIsABug) {
  Reducing f(1 << 20);
  GradReadyFn hook = f.red.hook();
  hook(layer(0));  // 20 of 64
  EXPECT_THROW(f.red.finish(), InternalError);
}

}  // namespace
}  // namespace ft
