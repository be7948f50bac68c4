// The token maps of the window ops (Backend::window_partition, window_reverse, patch_merge,
// patch_split, upsample_nearest, upsample_nearest_backward: CDEIT's U-shaped Swin stages) and
// their shape checks, shared by the CPU and CUDA backends so both compute the same
// permutation and refuse the same arguments. The maps are plain arithmetic usable on the host
// and in CUDA kernels (FT_HD).
//
// Every op moves whole rows of C features between two token layouts of a batch of grids:
//   grid    x[B, H*W, C]           token t = y*W + x (row-major), the residual stream's layout
//   windows [B*nW, w*w, C]         nW = (H/w)*(W/w) windows of sample b at rows b*nW .. ,
//                                  window (wy, wx) = wy*(W/w) + wx, position (iy, ix) = iy*w + ix
//                                  in it; with shift s the grid is first rolled by -s along both
//                                  axes (Swin's torch.roll(x, (-s, -s))): window position
//                                  (Y, X) holds token ((Y + s) mod H, (X + s) mod W)
//   merged  [B, (H/2)*(W/2), 4C]   token (i, j) = the 2x2 block (2i + dy, 2j + dx) concatenated in
//                                  Swin's PatchMerging order k = 2*dx + dy: (0,0), (1,0), (0,1),
//                                  (1,1) as (dy, dx); features k*C .. k*C + C-1
//   upsampled [B, 2H*2W, C]        token (Y, X) = x's token (Y/2, X/2) (nearest neighbour x2)
//   transposed [B, W*H, C]         token x*H + y = the grid's token y*W + x (rows of the grid
//                                  regrouped: [B, H, W, C] -> [B, W, H, C]; the adaLN product's
//                                  [b, 6, D] -> [6, b, D] as a 1 x (b*6) grid)
// The five maps below give, for a destination row, the source row (each op's CPU and CUDA
// implementations only copy rows, except upsample's backward, which sums the four rows of a
// 2x2 block in the fixed order (dy, dx) = (0,0), (0,1), (1,0), (1,1)).
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

#ifdef __CUDACC__
#define FT_HD __host__ __device__ __forceinline__
#else
#define FT_HD inline
#endif

namespace ft::window {

enum class Op : int { partition, reverse, merge, split, upsample, upsample_bwd, transpose };

struct Geom {
  int64_t B = 0, H = 0, W = 0, C = 0;  // the grid x[B, H*W, C] (upsample: the small grid)
  int64_t w = 1, s = 0;                // window size and shift (partition, reverse)
};

// Rows of the destination of `op` (rows of C features; merge: of C features too, 4 a token).
FT_HD int64_t dst_rows(Op op, const Geom& g) {
  const int64_t n = g.B * g.H * g.W;
  return op == Op::upsample ? 4 * n : n;
}

// partition: window row r -> grid row
FT_HD int64_t partition_src(const Geom& g, int64_t r) {
  const int64_t T = g.H * g.W, ww = g.w * g.w, nwx = g.W / g.w;
  const int64_t b = r / T, rem = r % T, win = rem / ww, pos = rem % ww;
  const int64_t y = ((win / nwx) * g.w + pos / g.w + g.s) % g.H;
  const int64_t x = ((win % nwx) * g.w + pos % g.w + g.s) % g.W;
  return b * T + y * g.W + x;
}
// reverse: grid row r -> window row
FT_HD int64_t reverse_src(const Geom& g, int64_t r) {
  const int64_t T = g.H * g.W, nwx = g.W / g.w;
  const int64_t b = r / T, t = r % T;
  const int64_t Y = (t / g.W - g.s + g.H) % g.H, X = (t % g.W - g.s + g.W) % g.W;
  return b * T + ((Y / g.w) * nwx + X / g.w) * g.w * g.w + (Y % g.w) * g.w + X % g.w;
}
// merge: merged sub-row q (token q/4, part k = q%4) -> grid row
FT_HD int64_t merge_src(const Geom& g, int64_t q) {
  const int64_t W2 = g.W / 2, T2 = (g.H / 2) * W2, k = q % 4, r = q / 4, b = r / T2, t = r % T2;
  return b * g.H * g.W + (2 * (t / W2) + (k & 1)) * g.W + 2 * (t % W2) + (k >> 1);
}
// split: grid row r -> merged sub-row
FT_HD int64_t split_src(const Geom& g, int64_t r) {
  const int64_t T = g.H * g.W, b = r / T, t = r % T, y = t / g.W, x = t % g.W;
  return (b * (T / 4) + (y / 2) * (g.W / 2) + x / 2) * 4 + 2 * (x & 1) + (y & 1);
}
// upsample: row of the 2H x 2W grid -> row of the H x W grid
FT_HD int64_t upsample_src(const Geom& g, int64_t r) {
  const int64_t T4 = 4 * g.H * g.W, b = r / T4, t = r % T4, Y = t / (2 * g.W), X = t % (2 * g.W);
  return b * g.H * g.W + (Y / 2) * g.W + X / 2;
}
// upsample backward: row of the H x W grid, block element e in 0..3 -> row of the 2H x 2W grid
FT_HD int64_t upsample_bwd_src(const Geom& g, int64_t r, int e) {
  const int64_t T = g.H * g.W, b = r / T, t = r % T, y = t / g.W, x = t % g.W;
  return b * 4 * T + (2 * y + (e >> 1)) * 2 * g.W + 2 * x + (e & 1);
}
// transpose: row of the transposed grid [B, W*H, C] (token x*H + y) -> grid row (y*W + x)
FT_HD int64_t transpose_src(const Geom& g, int64_t r) {
  const int64_t T = g.H * g.W, b = r / T, t = r % T;
  return b * T + (t % g.H) * g.W + t / g.H;
}
// The source row of destination row r for the permutations (not upsample_bwd).
FT_HD int64_t src_row(Op op, const Geom& g, int64_t r) {
  switch (op) {
    case Op::partition: return partition_src(g, r);
    case Op::reverse: return reverse_src(g, r);
    case Op::merge: return merge_src(g, r);
    case Op::split: return split_src(g, r);
    case Op::transpose: return transpose_src(g, r);
    default: return upsample_src(g, r);
  }
}

inline const char* op_name(Op op) {
  switch (op) {
    case Op::partition: return "window_partition";
    case Op::reverse: return "window_reverse";
    case Op::merge: return "patch_merge";
    case Op::split: return "patch_split";
    case Op::upsample: return "upsample_nearest";
    case Op::transpose: return "grid_transpose";
    default: return "upsample_nearest_backward";
  }
}

// Checks dst and src of `op` on the grid [B, grid_h*grid_w, C] (B and C from the grid-side
// tensor) and returns the geometry. window/shift only for partition/reverse (else 1, 0).
inline Geom check(Op op, const Tensor& dst, const Tensor& src, int grid_h, int grid_w, int window, int shift) {
  const char* name = op_name(op);
  FT_CHECK(!dst.empty() && !src.empty(), name, ": both tensors must be given");
  FT_CHECK(dst.data != src.data, name, ": out and in must not alias (a permutation is not in place)");
  FT_CHECK(grid_h >= 1 && grid_w >= 1, name, ": grid ", grid_h, "x", grid_w, " must be positive");
  // the tensor laid out as the grid [B, H*W, C]
  const bool grid_is_dst = op == Op::reverse || op == Op::split || op == Op::upsample_bwd;
  const Tensor& gt = grid_is_dst ? dst : src;
  const Tensor& ot = grid_is_dst ? src : dst;
  const int64_t T = int64_t{grid_h} * grid_w;
  FT_CHECK(gt.ndim == 3 && gt.dim(1) == T, name, ": the grid tensor ", gt.shape_str(), " should be [B, ", grid_h,
           "*", grid_w, "=", T, ", C]");
  Geom g;
  g.B = gt.dim(0), g.H = grid_h, g.W = grid_w, g.C = gt.dim(2);
  FT_CHECK(g.B >= 1 && g.C >= 1, name, ": empty grid tensor ", gt.shape_str());
  int64_t want0 = g.B, want1 = T, want2 = g.C;
  if (op == Op::partition || op == Op::reverse) {
    FT_CHECK(window >= 1 && grid_h % window == 0 && grid_w % window == 0, name, ": window ", window,
             " must divide the grid ", grid_h, "x", grid_w);
    FT_CHECK(shift >= 0 && shift < window, name, ": shift ", shift, " must be in [0, window ", window, ")");
    g.w = window, g.s = shift;
    want0 = g.B * (T / (int64_t{window} * window)), want1 = int64_t{window} * window;
  } else if (op == Op::merge || op == Op::split) {
    FT_CHECK(grid_h % 2 == 0 && grid_w % 2 == 0, name, ": grid ", grid_h, "x", grid_w, " must be even");
    want1 = T / 4, want2 = 4 * g.C;
  } else if (op != Op::transpose) {
    want1 = 4 * T;  // upsample: the fine grid has 4x the rows
  }
  FT_CHECK(ot.ndim == 3 && ot.dim(0) == want0 && ot.dim(1) == want1 && ot.dim(2) == want2, name, ": ",
           grid_is_dst ? "in " : "out ", ot.shape_str(), " should be [", want0, ", ", want1, ", ", want2,
           "] for the grid ", gt.shape_str());
  return g;
}

// The geometry of `windows` [B, T, C], an operand held in window order (row r = the grid's
// row partition_src(g, r)), beside `grid` [B, T, C] in token order: checked as
// window_reverse's windows and grid, so the fused ops accept exactly the windows it does.
inline Geom check_window_order(const char* op, const Tensor& grid, const Tensor& windows, int grid_h, int grid_w,
                               int window, int shift) {
  FT_CHECK(grid.ndim == 3 && windows.ndim == 3 && windows.dim(0) == grid.dim(0) && windows.dim(1) == grid.dim(1) &&
               windows.dim(2) == grid.dim(2),
           op, ": the window-ordered operand ", windows.shape_str(), " should be shaped like ", grid.shape_str());
  const int64_t ww = int64_t{window} * window;
  FT_CHECK(window >= 1 && grid.dim(1) % ww == 0, op, ": T ", grid.dim(1), " is not a whole number of ", window, "x",
           window, " windows");
  const Tensor view = windows.view({windows.dim(0) * (windows.dim(1) / ww), ww, windows.dim(2)});
  return check(Op::reverse, grid, view, grid_h, grid_w, window, shift);
}

}  // namespace ft::window
