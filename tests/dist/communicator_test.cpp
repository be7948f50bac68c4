// The single-process communicator: rank 0 of 1, and every collective is the identity.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "dist/communicator.h"
#include "dist/nccl_communicator.h"
#include "scoped_env.h"

namespace ft {
namespace {

// `plan --ranks N` in one process estimates NCCL's buffers from the CTA caps the run would use,
// so a cap raised or lifted (FT_NCCL_CTAS=0: NCCL's own choice, counted as 32) is planned for,
// and every estimate stays above what 2 H200s measured for those CTAs (docs/PERFORMANCE.md,
// session 37: main + background CTAs -> GiB).
TEST(NcclEstimate, FollowsBothCommunicatorsCtaCapsAndStaysAboveWhatWasMeasured) {
  constexpr double kGiB = 1 << 30;
  struct Case { const char *main, *background; double measured_gib; };
  for (const Case c : {Case{nullptr, nullptr, 0.97}, Case{"16", "8", 0.97}, Case{"0", nullptr, 1.28}, Case{"32", "8", 1.28},
                       Case{"8", "8", 0.77}, Case{"16", "4", 0.87}, Case{"0", "0", 1.08}}) {
    ScopedEnv m("FT_NCCL_CTAS", c.main), b("FT_NCCL_BACKGROUND_CTAS", c.background);
    const double estimate = nccl_device_bytes_estimate() / kGiB;
    EXPECT_GT(estimate, c.measured_gib) << (c.main ? c.main : "default") << "/" << (c.background ? c.background : "default");
    EXPECT_LT(estimate, c.measured_gib + 0.25) << "so far above the measurement that plans would be needlessly small";
  }
  ScopedEnv m("FT_NCCL_CTAS", "16"), b("FT_NCCL_BACKGROUND_CTAS", "8");
  const size_t at16 = nccl_device_bytes_estimate();
  ScopedEnv m2("FT_NCCL_CTAS", "32");
  EXPECT_EQ(nccl_device_bytes_estimate() - at16, size_t{16} * (25 << 20)) << "each CTA more costs its buffers";
  ScopedEnv m3("FT_NCCL_CTAS", "65");
  EXPECT_THROW(nccl_device_bytes_estimate(), UserError) << "a cap out of range is refused, naming the variable";
}

TEST(SingleProcessCommunicator, IsRankZeroOfOneAndCollectivesAreIdentity) {
  auto be = make_cpu_backend();
  auto comm = make_single_process_communicator(*be);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  std::vector<float> a = {1, 2, 3, 4}, b(4, 0.0f);
  comm->all_reduce_sum(Tensor(a.data(), DType::f32, {4}));
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
  comm->all_gather(Tensor(a.data(), DType::f32, {4}), Tensor(b.data(), DType::f32, {4}));
  EXPECT_EQ(b, a);
  const Tensor chunk[1] = {Tensor(a.data(), DType::f32, {4})};
  comm->reduce_scatter_group(chunk);  // one rank: its piece is the whole chunk, already the sum
  comm->all_gather_group(chunk);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
  double v[2] = {1.5, -2};
  comm->all_reduce_sum(v);
  EXPECT_EQ(v[0], 1.5);
  EXPECT_EQ(v[1], -2);
  EXPECT_EQ(comm->all_reduce_min(7), 7);
  EXPECT_THROW(comm->broadcast(Tensor(a.data(), DType::f32, {4}), 1), InternalError);
  EXPECT_THROW(comm->all_gather(Tensor(a.data(), DType::f32, {4}), Tensor(b.data(), DType::f32, {2})), InternalError);
}

}  // namespace
}  // namespace ft
