// The single-process communicator: rank 0 of 1, and every collective is the identity.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "dist/communicator.h"

namespace ft {
namespace {

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
