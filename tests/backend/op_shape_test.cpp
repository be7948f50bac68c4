// The per-op planning queries (OpShape): named constructors, and the CPU's
// stream/event seam (synchronous no-ops).
#include <omp.h>

#include <vector>

#include "backend/cpu/attention.h"
#include "op_test_util.h"

namespace ft::test {
namespace {


TEST(OpShape, NamedConstructorsFillTheirFields) {
  const OpShape m = OpShape::matmul(8, 16, 48);
  EXPECT_EQ(m.kind, OpShape::Kind::matmul);
  EXPECT_EQ(m.rows, 8);
  EXPECT_EQ(m.cols, 16);
  EXPECT_EQ(m.out_cols, 48);
  const OpShape a = OpShape::attention(2, 64, 4, 32, false, true);
  EXPECT_EQ(a.kind, OpShape::Kind::attention);
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.seq, 64);
  EXPECT_EQ(a.heads, 4);
  EXPECT_EQ(a.head_size, 32);
  EXPECT_EQ(a.rows, 128);
  EXPECT_EQ(a.cols, 128);
  EXPECT_FALSE(a.causal);
  EXPECT_TRUE(a.varlen);
  EXPECT_FALSE(a.packed);
  const OpShape pk = OpShape::attention(2, 64, 4, 32, true, false, true);
  EXPECT_TRUE(pk.causal);
  EXPECT_FALSE(pk.varlen);
  EXPECT_TRUE(pk.packed);
  const OpShape c = OpShape::classifier(8, 50257, 50304);
  EXPECT_EQ(c.cols, 50257);
  EXPECT_EQ(c.out_cols, 50304);
}

TEST(OpShape, CpuWorkspaceGrowsWithAttentionSeq) {
  auto be = make_cpu_backend();
  const std::vector<OpShape> none = {OpShape::matmul(64, 32, 96), OpShape::elementwise(1000)};
  const std::vector<OpShape> short_att = {OpShape::attention(2, 64, 4, 16)};
  const std::vector<OpShape> long_att = {OpShape::attention(2, 1024, 4, 16, false),
                                         OpShape::matmul(2048, 64, 64)};
  EXPECT_EQ(be->workspace_bytes(none, Precision::fp32), 0u);
  EXPECT_GT(be->workspace_bytes(short_att, Precision::fp32), 0u);
  EXPECT_GT(be->workspace_bytes(long_att, Precision::fp32),
            be->workspace_bytes(short_att, Precision::fp32));
  EXPECT_EQ(be->workspace_bytes(long_att, Precision::fp32) % 256, 0u);
  // the max over ops, not the sum
  std::vector<OpShape> both = short_att;
  both.insert(both.end(), long_att.begin(), long_att.end());
  EXPECT_EQ(be->workspace_bytes(both, Precision::fp32),
            be->workspace_bytes(long_att, Precision::fp32));
}

TEST(OpShape, CpuUnsupported) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->unsupported(OpShape::attention(2, 64, 4, 16, false, true), Precision::fp32), "");
  EXPECT_EQ(be->unsupported(OpShape::matmul(2, 3, 4), Precision::fp32), "");
  EXPECT_NE(be->unsupported(OpShape::matmul(2, 3, 4), Precision::bf16), "");
  EXPECT_NE(be->unsupported(OpShape::attention(2, 64, 0, 0), Precision::fp32), "");
}

// The CPU is synchronous: null handles, and every call is a no-op that must not throw.
TEST(StreamSeam, CpuHandlesAreNullNoOps) {
  auto be = make_cpu_backend();
  StreamHandle compute = be->compute_stream(), side = be->create_stream(StreamPriority::normal);
  EventHandle e = be->create_event();
  EXPECT_EQ(compute.native, nullptr);
  EXPECT_EQ(side.native, nullptr);
  EXPECT_EQ(e.native, nullptr);
  be->record_event(e, compute);
  be->stream_wait_event(side, e);
  be->synchronize_stream(side);
  be->synchronize_stream(compute);
  be->destroy_event(e);
  be->destroy_stream(side);
}

}  // namespace
}  // namespace ft::test
