// device_trace::kernel_name: the names the device trace gives kernels (bench/trace_summary.py
// groups and compares kernels by them).
#include <gtest/gtest.h>

#include "backend/device_trace.h"

namespace ft {
namespace {

TEST(DeviceTraceNames, DropsTheReturnTypeAndTheArgumentList) {
  EXPECT_EQ(device_trace::kernel_name("void ft::cuda::adamw_kernel<__nv_bfloat16>(float*, int)"),
            "ft::cuda::adamw_kernel<__nv_bfloat16>");
  EXPECT_EQ(device_trace::kernel_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
}

TEST(DeviceTraceNames, KeepsKernelsOfAnonymousNamespacesApart) {
  // cutting at the namespace's "(" named both "ft::cuda::" (session 18's CDEIT trace)
  const std::string a = device_trace::kernel_name(
      "void ft::cuda::(anonymous namespace)::norm_modulate_residual_backward_kernel<__nv_bfloat16, 2, true>(int*)");
  const std::string b = device_trace::kernel_name(
      "void ft::cuda::(anonymous namespace)::norm_modulate_residual_colsum_kernel<__nv_bfloat16>(int*)");
  EXPECT_EQ(a, "ft::cuda::{anon}::norm_modulate_residual_backward_kernel<__nv_bfloat16, 2, true>");
  EXPECT_EQ(b, "ft::cuda::{anon}::norm_modulate_residual_colsum_kernel<__nv_bfloat16>");
}

TEST(DeviceTraceNames, AParenthesisInsideTemplateArgumentsIsNotTheArgumentList) {
  EXPECT_EQ(device_trace::kernel_name("void k<void (*)(int), 3>(float)"), "k<void (*)(int), 3>");
}

}  // namespace
}  // namespace ft
