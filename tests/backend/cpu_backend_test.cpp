// CpuBackend plumbing: memory, workspace sizing, dtype checks.
#include "backend/cpu/cpu_backend.h"

#include <cstdint>

#include "core/error.h"
#include "models/host_transfer.h"
#include "op_test_util.h"

namespace ft::test {
namespace {

TEST(CpuBackend, AllocIsAlignedAndZeroed) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->device(), DeviceKind::cpu);
  EXPECT_NE(be->describe().find("cpu"), std::string::npos);
  auto* p = static_cast<unsigned char*>(be->alloc(1000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 0);
  std::vector<float> src = {1, 2, 3}, dst(3);
  be->copy_to_device(p, src.data(), 12);
  be->copy_to_host(dst.data(), p, 12);
  EXPECT_EQ(src, dst);
  be->zero(Tensor(p, DType::f32, {3}));
  be->copy_to_host(dst.data(), p, 12);
  EXPECT_EQ(dst, (std::vector<float>{0, 0, 0}));
  be->synchronize();
  be->free(p);
}

TEST(CpuBackend, LossReadbackSumsWhatStartCopiedAndChecksItsUse) {
  auto be = make_cpu_backend();
  LossReadback rb;
  std::vector<float> losses = {0.5f, 1.25f, 2.0f, 4.0f};
  Tensor t(losses.data(), DType::f32, {4});
  EXPECT_THROW(rb.start(t), InternalError);  // not bound
  rb.bind(*be, 4);
  rb.start(t);
  losses[0] = 100.f;  // the copy was taken at start (on the CPU, at once)
  EXPECT_DOUBLE_EQ(rb.sum(), 7.75);
  EXPECT_THROW(rb.sum(), InternalError);  // no read-back pending
  EXPECT_DOUBLE_EQ(rb.read(t.range(0, 2)), 101.25);
  std::vector<float> five(5, 1.f);
  EXPECT_THROW(rb.start(Tensor(five.data(), DType::f32, {5})), InternalError);  // beyond the staging
  std::vector<int32_t> ints(2);
  EXPECT_THROW(rb.start(Tensor(ints.data(), DType::i32, {2})), InternalError);
}

TEST(CpuBackend, MemInfoReadsProcMeminfo) {
  auto be = make_cpu_backend();
  size_t free_b = 0, total_b = 0;
  be->mem_info(&free_b, &total_b);
  EXPECT_GT(total_b, 0u);
  EXPECT_GT(free_b, 0u);
  EXPECT_LE(free_b, total_b);
}

TEST(CpuBackend, WorkspaceGrowsWithSequenceLength) {
  auto be = make_cpu_backend();
  const OpShape a[1] = {OpShape::attention(1, 64, 1, 16)}, b[1] = {OpShape::attention(1, 1024, 1, 16)};
  EXPECT_GT(be->workspace_bytes(a, Precision::fp32), 0u);
  EXPECT_GT(be->workspace_bytes(b, Precision::fp32), be->workspace_bytes(a, Precision::fp32));
  EXPECT_EQ(be->workspace_bytes(b, Precision::fp32) % 256, 0u);
}

TEST(CpuBackend, RejectsWrongDtypes) {
  Harness h;
  std::vector<int32_t> xi(4);
  std::vector<float> out(4);
  EXPECT_THROW(h->gelu_forward(tf(out, {4}), ti(xi, {4})), InternalError);
  EXPECT_THROW(h->sum_squares(ti(xi, {4})), InternalError);
  EXPECT_THROW(h->gelu_forward(tf(out, {4}), Tensor()), InternalError);
}

}  // namespace
}  // namespace ft::test
