// The CUDA backend's environment switches (backend/cuda/switches.h): what each value selects,
// and that a value outside a switch's list is a UserError naming the variable. Reading the
// switches needs no device, so these run in every CUDA build (no GPU_ prefix).
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/switches.h"
#include "core/error.h"
#include "gpu_test_util.h"

namespace ft {
namespace {

using gputest::ScopedEnv;

// Every switch these tests touch, unset for the test's duration (the outer environment, e.g.
// a device script's A/B variable, must not decide a default).
struct CleanSwitches {
  ScopedEnv tune{"FT_CUDNN_ATTN_TUNE", nullptr}, residual{"FT_RESIDUAL_NORM", nullptr},
      autotune{"FT_MATMUL_AUTOTUNE", nullptr}, attention{"FT_ATTENTION", nullptr},
      bgrad{"FT_NO_BGRAD_EPILOGUE", nullptr}, reduction{"FT_MATMUL_REDUCTION", nullptr},
      staged{"FT_RESIDUAL_NORM_STAGED", nullptr}, splitk{"FT_MATMUL_SPLITK", nullptr},
      attention_backward{"FT_ATTENTION_BACKWARD", nullptr}, onepass_keys{"FT_ATTN_ONEPASS_KEYS", nullptr},
      dependent_launch{"FT_DEPENDENT_LAUNCH", nullptr};
};

std::string error_of_reading() {
  try {
    cuda::read_switches();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaSwitches, DefaultsTuneAttentionAndProductsAndFuseAndStageTheResidualNorm) {
  CleanSwitches clean;
  const cuda::Switches s = cuda::read_switches();
  EXPECT_TRUE(s.attention_tune);
  EXPECT_TRUE(s.matmul_autotune);
  EXPECT_TRUE(s.matmul_tune_quiet);
  EXPECT_EQ(s.attention, cuda::Switches::Attention::automatic);
  EXPECT_TRUE(s.residual_norm_fused_fwd);
  EXPECT_TRUE(s.residual_norm_fused_bwd);
  EXPECT_FALSE(s.bgrad_epilogue);
  EXPECT_FALSE(s.matmul_fp32_reduction);
  EXPECT_TRUE(s.residual_norm_staged);
  EXPECT_EQ(s.matmul_split_k, cuda::Switches::SplitK::automatic);
  EXPECT_EQ(s.attention_backward, cuda::Switches::AttentionBackward::automatic);
  EXPECT_TRUE(s.dependent_launch);
}

TEST(CudaSwitches, EachValueSelectsItsPath) {
  CleanSwitches clean;
  {
    ScopedEnv v("FT_CUDNN_ATTN_TUNE", "0");
    EXPECT_FALSE(cuda::read_switches().attention_tune);
  }
  {
    ScopedEnv v("FT_RESIDUAL_NORM", "forward");
    const cuda::Switches s = cuda::read_switches();
    EXPECT_TRUE(s.residual_norm_fused_fwd);
    EXPECT_FALSE(s.residual_norm_fused_bwd);
  }
  {
    ScopedEnv v("FT_RESIDUAL_NORM", "separate");
    const cuda::Switches s = cuda::read_switches();
    EXPECT_FALSE(s.residual_norm_fused_fwd);
    EXPECT_FALSE(s.residual_norm_fused_bwd);
  }
  {
    ScopedEnv v("FT_MATMUL_AUTOTUNE", "plain");
    const cuda::Switches s = cuda::read_switches();
    EXPECT_TRUE(s.matmul_autotune);
    EXPECT_FALSE(s.matmul_tune_quiet);
  }
  {
    ScopedEnv v("FT_NO_BGRAD_EPILOGUE", "0");
    EXPECT_TRUE(cuda::read_switches().bgrad_epilogue);
  }
  {
    ScopedEnv v("FT_MATMUL_REDUCTION", "fp32");
    EXPECT_TRUE(cuda::read_switches().matmul_fp32_reduction);
  }
  {
    ScopedEnv v("FT_RESIDUAL_NORM_STAGED", "0");
    EXPECT_FALSE(cuda::read_switches().residual_norm_staged);
  }
  {
    ScopedEnv v("FT_DEPENDENT_LAUNCH", "0");
    EXPECT_FALSE(cuda::read_switches().dependent_launch);
  }
  {
    ScopedEnv v("FT_MATMUL_SPLITK", "none");
    EXPECT_EQ(cuda::read_switches().matmul_split_k, cuda::Switches::SplitK::none);
  }
  {
    ScopedEnv v("FT_MATMUL_SPLITK", "any");
    EXPECT_EQ(cuda::read_switches().matmul_split_k, cuda::Switches::SplitK::any);
  }
  {
    ScopedEnv v("FT_ATTENTION_BACKWARD", "onepass");
    EXPECT_EQ(cuda::read_switches().attention_backward, cuda::Switches::AttentionBackward::onepass);
  }
  {
    ScopedEnv v("FT_ATTENTION_BACKWARD", "library");
    EXPECT_EQ(cuda::read_switches().attention_backward, cuda::Switches::AttentionBackward::library);
  }
  {
    ScopedEnv v("FT_ATTENTION_BACKWARD", "wgmma");
    EXPECT_EQ(cuda::read_switches().attention_backward, cuda::Switches::AttentionBackward::wgmma);
  }
}

TEST(CudaSwitches, AValueOutsideTheListNamesTheVariableAndTheChoices) {
  CleanSwitches clean;
  {
    ScopedEnv v("FT_CUDNN_ATTN_TUNE", "yes");
    const std::string e = error_of_reading();
    EXPECT_NE(e.find("FT_CUDNN_ATTN_TUNE=yes"), std::string::npos) << e;
    EXPECT_NE(e.find("0, 1"), std::string::npos) << e;
  }
  {
    ScopedEnv v("FT_RESIDUAL_NORM", "both");
    const std::string e = error_of_reading();
    EXPECT_NE(e.find("FT_RESIDUAL_NORM=both"), std::string::npos) << e;
    EXPECT_NE(e.find("fused, forward, separate"), std::string::npos) << e;
  }
  {
    ScopedEnv v("FT_MATMUL_AUTOTUNE", "2");
    EXPECT_NE(error_of_reading().find("FT_MATMUL_AUTOTUNE=2"), std::string::npos);
  }
  {
    ScopedEnv v("FT_MATMUL_REDUCTION", "bf16");
    const std::string e = error_of_reading();
    EXPECT_NE(e.find("FT_MATMUL_REDUCTION=bf16"), std::string::npos) << e;
    EXPECT_NE(e.find("any, fp32"), std::string::npos) << e;
  }
  {
    ScopedEnv v("FT_RESIDUAL_NORM_STAGED", "yes");
    EXPECT_NE(error_of_reading().find("FT_RESIDUAL_NORM_STAGED=yes"), std::string::npos);
  }
  {
    ScopedEnv v("FT_DEPENDENT_LAUNCH", "on");
    EXPECT_NE(error_of_reading().find("FT_DEPENDENT_LAUNCH=on"), std::string::npos);
  }
  {
    ScopedEnv v("FT_ATTENTION_BACKWARD", "cudnn");
    const std::string e = error_of_reading();
    EXPECT_NE(e.find("FT_ATTENTION_BACKWARD=cudnn"), std::string::npos) << e;
    EXPECT_NE(e.find("auto, onepass, wgmma, library"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace ft
