// Shared by the first kernels of fittrain's two-stage column reductions (matmul.cu's bias
// gradient, silu.cu's SiLU backward that also sums the bias gradient): device code only.
#pragma once
#include "backend/cuda/cuda_common.cuh"

namespace ft::cuda {

// Where thread (tx, ty) of such a kernel's block of 32 x ROWS threads works: its pack of P
// columns from col = col0 + tx*P (the block's 32*P columns start at col0 = blockIdx.x * 32*P)
// and row group g = blockIdx.y, rows [start, end) of N, of which it takes start + ty,
// + ROWS, ... (store_column_partials below writes the same tile's sums).
struct ColumnTile {
  int ty;
  int64_t col0, col, start, end;
};
template <int P>
__device__ __forceinline__ ColumnTile column_tile(int64_t N, int64_t rows_per_group) {
  const int tx = threadIdx.x % 32;
  const int64_t col0 = (int64_t)blockIdx.x * 32 * P, start = (int64_t)blockIdx.y * rows_per_group;
  return ColumnTile{(int)(threadIdx.x / 32), col0, col0 + tx * P, start,
                    start + rows_per_group < N ? start + rows_per_group : N};
}

// The end of such a kernel: thread (tx, ty) of a block of 32 x ROWS threads holds in acc
// its pack of P columns' sums (columns col0 + tx*P ..) over its rows; the ROWS row slices are
// added in a fixed order through sh into partial[g][col] for the block's 32*P columns below C.
// The result depends only on the launch shape.
template <int P, int ROWS>
__device__ __forceinline__ void store_column_partials(float (&sh)[ROWS][32 * P], const float (&acc)[P],
                                                      float* partial, int64_t g, int64_t col0, int64_t C) {
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < P; ++k) sh[ty][tx * P + k] = acc[k];
  __syncthreads();
  for (int i = threadIdx.x; i < 32 * P; i += 32 * ROWS) {
    if (col0 + i >= C) break;
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s += sh[r][i];
    partial[g * C + col0 + i] = s;
  }
}

}  // namespace ft::cuda
