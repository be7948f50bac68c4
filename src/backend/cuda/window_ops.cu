// The window ops (CDEIT's U-shaped Swin stages): row gathers between token layouts, one
// thread per element of the destination (coalesced writes; reads come in rows of C
// contiguous features), grid-stride loops, any C and alignment. upsample's backward sums the
// 2x2 block's four rows in fp32 in the order of window_shapes.h (deterministic, no atomics).
#include "backend/cuda/window_ops.cuh"

namespace ft::cuda {

namespace {

__global__ void window_gather_kernel(window::Op op, AnyPtr dst, AnyCPtr src, window::Geom g, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / g.C, c = i % g.C;
    store_any(dst, i, load_any(src, window::src_row(op, g, r) * g.C + c));
  }
}

__global__ void upsample_bwd_kernel(AnyPtr dst, AnyCPtr src, window::Geom g, int64_t n) {
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
  if (op == window::Op::upsample_bwd) upsample_bwd_kernel<<<blocks, kPackBlock, 0, c.stream>>>(dst, src, g, n);
  else window_gather_kernel<<<blocks, kPackBlock, 0, c.stream>>>(op, dst, src, g, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
