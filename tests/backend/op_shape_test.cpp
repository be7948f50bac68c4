// The per-op planning queries (OpShape) against the deprecated OpDims ones, and the CPU's
// stream/event seam (synchronous no-ops).
#include <omp.h>

#include <vector>

#include "backend/cpu/attention.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

OpDims gpt2_dims(int64_t B, int64_t T, int64_t C, int64_t NH) {
  OpDims d;
  d.B = B;
  d.T = T;
  d.C = C;
  d.NH = NH;
  d.Vp = 50304;
  d.V = 50257;
  return d;
}

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
  const OpShape c = OpShape::classifier(8, 50257, 50304);
  EXPECT_EQ(c.cols, 50257);
  EXPECT_EQ(c.out_cols, 50304);
}

// The deprecated OpDims queries are GPT-2's op list through the new ones: same bytes.
TEST(OpShape, Gpt2ShapesGiveTheOldBytes) {
  auto be = make_cpu_backend();
  for (const OpDims& d : {gpt2_dims(4, 64, 768, 12), gpt2_dims(1, 1024, 768, 12),
                          gpt2_dims(8, 256, 1600, 25), OpDims{}}) {
    const std::vector<OpShape> ops = gpt2_op_shapes(d);
    EXPECT_EQ(be->workspace_bytes(d), be->workspace_bytes(ops, Precision::fp32));
    EXPECT_EQ(be->workspace_bytes(d),
              (attention_backward_workspace_bytes(d.T, omp_get_max_threads()) + 255) / 256 * 256);
    const OpShape att = OpShape::attention(d.B, d.T, d.NH, d.NH ? d.C / d.NH : 0);
    EXPECT_EQ(be->attention_saved_bytes(d, Precision::fp32),
              be->attention_saved_bytes(att, Precision::fp32));
    EXPECT_EQ(be->attention_saved_bytes(att, Precision::fp32),
              static_cast<size_t>(d.B * d.NH * d.T * d.T) * 4);
  }
  // GPT-2's list: embedding, sum of squares, layernorm, the four products, attention, classifier
  const std::vector<OpShape> ops = gpt2_op_shapes(gpt2_dims(4, 64, 768, 12));
  int products = 0, attention = 0;
  for (const OpShape& o : ops) {
    if (o.kind == OpShape::Kind::matmul) ++products;
    if (o.kind == OpShape::Kind::attention) {
      ++attention;
      EXPECT_TRUE(o.causal);
      EXPECT_FALSE(o.varlen);
      EXPECT_EQ(o.head_size, 64);
    }
  }
  EXPECT_EQ(products, 4);
  EXPECT_EQ(attention, 1);
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
  StreamHandle compute = be->compute_stream(), side = be->create_stream();
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
