// The window ops on CUDA (backend/cuda/window_ops.cu): see Backend::window_partition and
// backend/window_shapes.h for the token maps. dst and src may differ in dtype (f32, bf16,
// f16); values are converted, never computed, except upsample's backward (f32 sums of four).
#pragma once
#include "backend/cuda/any_dtype.cuh"
#include "backend/cuda/cuda_ops.cuh"
#include "backend/window_shapes.h"

namespace ft::cuda {

void window_op(const Ctx& c, window::Op op, AnyPtr dst, AnyCPtr src, const window::Geom& g);

}  // namespace ft::cuda
