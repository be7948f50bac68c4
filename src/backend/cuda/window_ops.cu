// The window ops (CDEIT's U-shaped Swin stages): row gathers between token layouts. Same dtype
// on both sides, rows a whole number of 16-byte packs and both pointers aligned (CDEIT's
// widths in bf16): one thread per pack, the source row computed once per pack (the element
// kernel spent most of its time on the map's 64-bit divisions: 8.9 ms of a 56 ms CDEIT step
// at B=32). Otherwise one thread per element of the destination, converting dtypes; both
// write coalesced and read whole rows, grid-stride loops, any C and alignment. upsample's backward sums the
// 2x2 block's four rows in fp32 in the order of window_shapes.h (deterministic, no atomics).
#include "backend/cuda/window_ops.cuh"

namespace ft::cuda {

namespace {

__global__ void window_gather_kernel(window::Op op, AnyPtr dst, AnyCPtr src, window::Geom g, int64_t n) {
  wait_for_prior_kernel();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / g.C, c = i % g.C;
    store_any(dst, i, load_any(src, window::src_row(op, g, r) * g.C + c));
  }
}

// Rows of `pr` 16-byte packs each (dst and src of one dtype).
__global__ void window_gather_packs_kernel(window::Op op, uint4* dst, const uint4* src, window::Geom g, int64_t pr,
                                           int64_t n) {
  wait_for_prior_kernel();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pr, k = i % pr;
    dst[i] = src[window::src_row(op, g, r) * pr + k];
  }
}

__global__ void upsample_bwd_kernel(AnyPtr dst, AnyCPtr src, window::Geom g, int64_t n) {
  wait_for_prior_kernel();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / g.C, c = i % g.C;
    float s = load_any(src, window::upsample_bwd_src(g, r, 0) * g.C + c);
    s += load_any(src, window::upsample_bwd_src(g, r, 1) * g.C + c);
    s += load_any(src, window::upsample_bwd_src(g, r, 2) * g.C + c);
    s += load_any(src, window::upsample_bwd_src(g, r, 3) * g.C + c);
    store_any(dst, i, s);
  }
}

}  // namespace

void window_op(const Ctx& c, window::Op op, AnyPtr dst, AnyCPtr src, const window::Geom& g) {
  const int64_t n = window::dst_rows(op, g) * g.C;
  if (n == 0) return;
  const unsigned blocks = grid_stride_blocks(n, c.num_sms);
  const size_t row_bytes = static_cast<size_t>(g.C) * dtype_size(dst.t);
  if (op != window::Op::upsample_bwd && dst.t == src.t && row_bytes % 16 == 0 && aligned16(dst.p) &&
      aligned16(src.p)) {
    const int64_t pr = static_cast<int64_t>(row_bytes / 16), packs = window::dst_rows(op, g) * pr;
    launch(c, window_gather_packs_kernel, dim3(grid_stride_blocks(packs, c.num_sms)), dim3(kPackBlock), 0, op,
           static_cast<uint4*>(dst.p), static_cast<const uint4*>(src.p), g, pr, packs);
  } else if (op == window::Op::upsample_bwd) {
    launch(c, upsample_bwd_kernel, dim3(blocks), dim3(kPackBlock), 0, dst, src, g, n);
  } else {
    launch(c, window_gather_kernel, dim3(blocks), dim3(kPackBlock), 0, op, dst, src, g, n);
  }
}

}  // namespace ft::cuda
