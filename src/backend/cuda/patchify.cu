// Patchify / unpatchify (DiT, CDEIT): permutations between an image [B,C,H,W] and its patch
// tokens [B,T,C*p*p] (token t = ty*(W/p) + tx, feature f = (c*p + py)*p + px; see
// Backend::patchify). One thread per element of the written tensor, so writes are coalesced
// and reads come in runs of p contiguous pixels; grid-stride loops, any p, any alignment.
// Image and tokens may differ in dtype (any_dtype.cuh): values are only converted, never
// computed, so f32 -> f32 and a bf16 round trip are exact.
#include "backend/cuda/any_dtype.cuh"
#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {

struct PatchGeom {
  int64_t B, C, H, W, p, Wp, T, F;  // F = C*p*p, Wp = W/p, T = (H/p)*Wp
};

// The image element of token element (b, t, f).
__device__ __forceinline__ int64_t pixel_of(const PatchGeom& g, int64_t tok) {
  const int64_t f = tok % g.F, bt = tok / g.F, t = bt % g.T, b = bt / g.T;
  const int64_t c = f / (g.p * g.p), r = f % (g.p * g.p), py = r / g.p, px = r % g.p;
  const int64_t ty = t / g.Wp, tx = t % g.Wp;
  return ((b * g.C + c) * g.H + ty * g.p + py) * g.W + tx * g.p + px;
}
// The token element of image element (b, c, h, w).
__device__ __forceinline__ int64_t token_of(const PatchGeom& g, int64_t pix) {
  const int64_t w = pix % g.W, h = (pix / g.W) % g.H, bc = pix / (g.W * g.H), c = bc % g.C, b = bc / g.C;
  const int64_t t = (h / g.p) * g.Wp + w / g.p, f = (c * g.p + h % g.p) * g.p + w % g.p;
  return (b * g.T + t) * g.F + f;
}

}  // namespace

// ---- CUDA kernels ---------------------------------------------------------------------------

__global__ void patchify_kernel(AnyPtr out, AnyCPtr img, PatchGeom g, int64_t n) {
  wait_for_prior_kernel();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, i, load_any(img, pixel_of(g, i)));
}

__global__ void unpatchify_kernel(AnyPtr img, AnyCPtr tokens, PatchGeom g, int64_t n) {
  wait_for_prior_kernel();
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(img, i, load_any(tokens, token_of(g, i)));
}

// ---- kernel launchers -----------------------------------------------------------------------

static PatchGeom geom(int64_t B, int64_t C, int64_t H, int64_t W, int64_t p) {
  return {B, C, H, W, p, W / p, (H / p) * (W / p), C * p * p};
}

void patchify(const Ctx& c, DType to, void* out, DType ti, const void* img, int64_t B, int64_t C, int64_t H,
              int64_t W, int64_t p) {
  const int64_t n = B * C * H * W;
  if (n == 0) return;
  launch(c, patchify_kernel, dim3(grid_stride_blocks(n, c.num_sms)), dim3(kPackBlock), 0, AnyPtr{out, to},
         AnyCPtr{img, ti}, geom(B, C, H, W, p), n);
}

void unpatchify(const Ctx& c, DType ti, void* img, DType tt, const void* tokens, int64_t B, int64_t C, int64_t H,
                int64_t W, int64_t p) {
  const int64_t n = B * C * H * W;
  if (n == 0) return;
  launch(c, unpatchify_kernel, dim3(grid_stride_blocks(n, c.num_sms)), dim3(kPackBlock), 0, AnyPtr{img, ti},
         AnyCPtr{tokens, tt}, geom(B, C, H, W, p), n);
}

}  // namespace ft::cuda
