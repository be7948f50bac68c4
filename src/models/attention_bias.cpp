#include "models/attention_bias.h"

#include "core/error.h"

namespace ft {

void qkv_bias_backward(Backend& be, Tensor dqkv_b, Tensor dqkv, Tensor dproj_b, Tensor proj_w, GradWrite gw) {
  const int64_t W = dproj_b.numel();
  FT_CHECK(W > 0 && dqkv_b.numel() == 3 * W && dqkv.dim(-1) == 3 * W && proj_w.numel() == W * W,
           "qkv_bias_backward: dqkv_b ", dqkv_b.shape_str(), ", dqkv ", dqkv.shape_str(), ", dproj_b ",
           dproj_b.shape_str(), ", proj_w ", proj_w.shape_str());
  be.column_sums(dqkv_b.range(0, W), dqkv, 0, gw);
  if (gw == GradWrite::overwrite) be.zero(dqkv_b.range(W, W));
  // d(b_v)[1, W] = d(b_p)[1, W] @ W_p[W, W]: the data-gradient product alone (no weight or bias
  // gradient, so no input)
  be.matmul_backward(dqkv_b.range(2 * W, W).view({1, W}), Tensor(), Tensor(), dproj_b.view({1, W}), Tensor(),
                     proj_w.view({W, W}), GradWrite::overwrite);
}

}  // namespace ft
