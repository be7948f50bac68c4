// The window ops on the CPU (Backend::window_partition, window_reverse, patch_merge,
// patch_split, upsample_nearest, upsample_nearest_backward; the token maps and shape checks are
// backend/window_shapes.h). The five permutations copy rows of C floats (exact); upsample's
// backward sums the four rows of each 2x2 block in a fixed order (deterministic).
#pragma once

#include "backend/window_shapes.h"
#include "core/tensor.h"

namespace ft {

// Checks (f32 only, shapes as window_shapes.h) and runs `op`: dst from src.
void window_op_cpu(window::Op op, Tensor dst, Tensor src, int grid_h, int grid_w, int window = 1, int shift = 0);

}  // namespace ft
