// Fused softmax + cross-entropy + gradient on the CPU, in place on the logits.
//
// Fusing avoids a second [B,T,Vp] buffer for the probabilities: the logits row becomes its
// own gradient. Rows are independent (parallel over tokens); the softmax subtracts the row
// max and sums in double. Columns >= V are vocabulary padding: excluded from the softmax and
// given gradient 0 so the padded rows of wte never move.
#pragma once
#include <cstdint>

namespace ft {

// logits[N,Vp] in; losses[N] = -log softmax(logits[n,:V])[targets[n]] (0 where target < 0).
// If dloss != 0: logits[n,v] = (p[v] - [v==target]) * dloss for v < V, 0 for v >= V, and
// rows with target < 0 become all zero. If dloss == 0: logits are left untouched.
// targets[n] < V is required (the caller checks).
void classifier_forward_backward_cpu(float* losses, float* logits, const int32_t* targets,
                                     int64_t N, int64_t V, int64_t Vp, float dloss);

}  // namespace ft
