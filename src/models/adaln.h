// adaLN pieces shared by DiT and CDEIT: the conditioning product and DiT's final layer.
//
// adaLN-Zero's conditioning product: the n modulation vectors of a
// block (shift, scale, gate, ...) from the conditioning sc[b, D] through one Linear(D, n*W)
// (torch's layout: weight [n*W, D], bias [n*W]). One product of width n*W instead of n of
// width W (n small launches and n bias reductions per block were ~4% of a DiT-S step); its
// [b, n, W] rows are then regrouped as [n, b, W], so chunk k is the contiguous [b, W] that
// modulate, the gated residual and norm_modulate take.
#pragma once
#include "backend/backend.h"

namespace ft {

// out[n, b, W] = regroup(sc @ w^T + bias). scratch: an activation-dtype tensor free during the
// call (a block buffer written later in the pass); when it holds fewer than b*n*W values (grids
// of one or two tokens) the product runs per chunk instead.
void adaln_forward(Backend& be, Tensor out, Tensor sc, Tensor w, Tensor bias, int n, Tensor scratch);

// The backward from dmod[n, b, W]: dw, dbias written or added (gw); dsc[b, D] += dmod . w
// (through tmp[b, D]). scratch as above.
void adaln_backward(Backend& be, Tensor dsc, Tensor tmp, Tensor dmod, Tensor sc, Tensor w, Tensor dw, Tensor dbias,
                    int n, Tensor scratch, GradWrite gw);

// DiT's final layer over the last tokens x[b, T, W]: (shift, scale) = adaLN(sc), the tokens
// normalized (no affine) and modulated, a linear to the patch's features [b, T, Fo], unpatchify
// into pred[b, C, H, W]. The model's buffers, viewed by it:
struct FinalLayerBuffers {
  Tensor fmod;        // [2, b, W] shift, scale
  Tensor mean, rstd;  // f32 [b*T]: the norm's statistics (mean empty for RMSNorm)
  Tensor mf;          // [b*T, W] the modulated tokens (the product's input)
  Tensor otok;        // [b, T, Fo] the product's output
  Tensor dfmod, dotok, dmf, tmp;  // backward only: [2, b, W], [b, T, Fo], [b*T, W], [b, D]
};
// The layer's weights, or their gradients: adaLN [2W, D] and [2W], out [Fo, W] and [Fo].
struct FinalLayerParams {
  Tensor ada_w, ada_b, out_w, out_b;
};

void final_layer_forward(Backend& be, const FinalLayerBuffers& f, const FinalLayerParams& p, Tensor sc, Tensor x,
                         Tensor pred, NormKind norm, int patch);
// From dpred: the weights' gradients g (written or added, gw), dres[b*T, W] = the tokens'
// gradient (written: the first gradient of the residual stream, so dres needs no zeroing; its
// old bytes are never read), dsc[b, D] += the conditioning's.
void final_layer_backward(Backend& be, const FinalLayerBuffers& f, const FinalLayerParams& p,
                          const FinalLayerParams& g, Tensor sc, Tensor x, Tensor dpred, Tensor dres, Tensor dsc,
                          NormKind norm, int patch, GradWrite gw);

}  // namespace ft
