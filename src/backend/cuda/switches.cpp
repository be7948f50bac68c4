#include "backend/cuda/switches.h"

#include <string>

#include "backend/cuda/backend_checks.h"

namespace ft::cuda {

namespace {
// Bias gradients through fittrain's column reduction unless FT_NO_BGRAD_EPILOGUE=0 asks for
// cuBLASLt's BGRADB epilogue. On H200 the epilogue is a separate kernel over dout anyway:
// GPT-2 124M, B=16, 12 layers, GPU_Perf.BiasGrad: 1.40 ms per step vs 0.90 ms for ours, and
// the B=8 step 15.89 vs 15.48 ms.
constexpr bool kBgradEpilogueDefault = false;
}  // namespace

Switches read_switches() {
  Switches s;
  const std::string at = env_choice("FT_MATMUL_AUTOTUNE", {"0", "1", "plain"}, "1");
  s.matmul_autotune = at != "0";
  s.matmul_tune_quiet = at == "1";
  s.matmul_tune_log = env_choice("FT_MATMUL_TUNE_LOG", {"0", "1"}, "0") == "1";
  s.matmul_fp32_reduction = env_choice("FT_MATMUL_REDUCTION", {"any", "fp32"}, "any") == "fp32";
  const std::string sk = env_choice("FT_MATMUL_SPLITK", {"auto", "none", "any"}, "auto");
  s.matmul_split_k = sk == "none"  ? Switches::SplitK::none
                     : sk == "any" ? Switches::SplitK::any
                                   : Switches::SplitK::automatic;
  s.gelu_epilogue = env_choice("FT_NO_GELU_EPILOGUE", {"0", "1"}, "0") == "0";
  s.gelu_strict = env_choice("FT_GELU_EPILOGUE_STRICT", {"0", "1"}, "0") == "1";
  const std::string a = env_choice("FT_ATTENTION", {"auto", "cudnn", "fittrain"}, "auto");
  s.attention = a == "cudnn"      ? Switches::Attention::cudnn
                : a == "fittrain" ? Switches::Attention::fittrain
                                  : Switches::Attention::automatic;
  const std::string ab = env_choice("FT_ATTENTION_BACKWARD", {"auto", "onepass", "wgmma", "library"}, "auto");
  s.attention_backward = ab == "onepass"   ? Switches::AttentionBackward::onepass
                         : ab == "wgmma"   ? Switches::AttentionBackward::wgmma
                         : ab == "library" ? Switches::AttentionBackward::library
                                           : Switches::AttentionBackward::automatic;
  s.attention_onepass_keys = std::stoi(env_choice("FT_ATTN_ONEPASS_KEYS", {"0", "16", "32"}, "0"));
  s.attention_tune = env_choice("FT_CUDNN_ATTN_TUNE", {"0", "1"}, "1") == "1";
  const std::string nb = env_choice("FT_NO_BGRAD_EPILOGUE", {"0", "1"}, "");
  s.bgrad_epilogue = nb.empty() ? kBgradEpilogueDefault : nb == "0";
  s.bgrad_strict = env_choice("FT_BGRAD_EPILOGUE_STRICT", {"0", "1"}, "0") == "1";
  // Off by default: on H200 (CUDA 13's cuBLASLt) it slows the whole B=8 step from 15.7 to
  // 17.0 ms (GPU_Perf.Gpt2SmallTrainingStep).
  s.dgelu_bgrad = env_choice("FT_DGELU_BGRAD", {"0", "1"}, "0") == "1";
  // SiLU's bias backward staged through shared memory: 0.797 ms at [131072, 2048] on an H100
  // against 0.858 with the register-staged rows (docs/PERFORMANCE.md, session 13)
  const std::string sb = env_choice("FT_SILU_BIAS", {"async", "rows", "tiles"}, "async");
  s.silu_bias = sb == "tiles" ? SiluBiasLayout::tiles : sb == "rows" ? SiluBiasLayout::rows : SiluBiasLayout::async;
  const std::string cl = env_choice("FT_CLASSIFIER", {"auto", "staged", "twopass"}, "auto");
  s.classifier = cl == "staged"    ? Switches::Classifier::staged
                 : cl == "twopass" ? Switches::Classifier::twopass
                                   : Switches::Classifier::automatic;
  const std::string sm = env_choice("FT_SILU_MATMUL", {"auto", "off", "cudnn"}, "auto");
  s.silu_matmul = sm == "off" ? SiluMatmul::off : sm == "cudnn" ? SiluMatmul::cudnn : SiluMatmul::automatic;
  const std::string rn = env_choice("FT_RESIDUAL_NORM", {"fused", "forward", "separate"}, "fused");
  s.residual_norm_fused_fwd = rn != "separate";
  s.residual_norm_fused_bwd = rn == "fused";
  s.residual_norm_staged = env_choice("FT_RESIDUAL_NORM_STAGED", {"0", "1"}, "1") == "1";
  s.dependent_launch = env_choice("FT_DEPENDENT_LAUNCH", {"0", "1"}, "1") == "1";
  return s;
}

}  // namespace ft::cuda
