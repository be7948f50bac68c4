// adaLN-Zero's conditioning product, shared by DiT and CDEIT: the n modulation vectors of a
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

}  // namespace ft
