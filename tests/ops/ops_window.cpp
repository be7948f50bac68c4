// Op table entries for the window ops (CDEIT's U-shaped Swin stages; backend/window_shapes.h):
// window_partition / window_reverse (plain and shifted windows), patch_merge / patch_split
// upsample_nearest with its backward, and grid_transpose (its own inverse with H, W swapped). Each permutation's backward is its inverse, so
// every case's grad mode checks the inverse against finite differences of the forward, and
// test mode compares backends exactly up to one rounding of the activation dtype.
// Dims: grid [B, H*W, C] with H, W; P = the window; n = the shift (both only for the
// window cases). Test shapes: non-square grids, one window over the whole grid, shift w/2
// and an odd shift, C off the 16-byte pack; perf shapes: CDEIT's first stage (B=32, 64x64
// tokens of 512 features, windows of 16, shift 8) and the up path's 32x32 -> 64x64.
#include "ops/op_table.h"

namespace ft::ops {

namespace {

Dims grid(int64_t B, int64_t H, int64_t W, int64_t C, int64_t window = 0, int64_t shift = 0) {
  Dims d;
  d.B = B, d.H = H, d.W = W, d.C = C, d.P = window, d.n = shift;
  return d;
}
int64_t tokens(const Dims& d) { return d.H * d.W; }
int gi(int64_t v) { return static_cast<int>(v); }

// Which op a case runs forward and what its output is shaped like.
enum class Kind { partition, reverse, merge, upsample, transpose };

// The shape of the op's "other side" (not the grid [B, H*W, C]).
std::vector<int64_t> other_shape(Kind k, const Dims& d) {
  const int64_t T = tokens(d);
  switch (k) {
    case Kind::partition:
    case Kind::reverse: return {d.B * T / (d.P * d.P), d.P * d.P, d.C};
    case Kind::merge: return {d.B, T / 4, 4 * d.C};
    case Kind::transpose: return {d.B, T, d.C};
    default: return {d.B, 4 * T, d.C};
  }
}

// Forward input "in", output "out", the cotangent "dout" and the input gradient "din".
void inputs(Kind k, const Dims& d, Gen& g, HostSet& hs) {
  const std::vector<int64_t> gs = {d.B, tokens(d), d.C}, os = other_shape(k, d);
  const bool grid_in = k != Kind::reverse;  // reverse reads windows and writes the grid
  const std::vector<int64_t>& is = grid_in ? gs : os;
  const std::vector<int64_t>& outs = grid_in ? os : gs;
  auto numel = [](const std::vector<int64_t>& s) { return s[0] * s[1] * s[2]; };
  hs.in("in", is, g.randn(numel(is)));
  hs.out("out", outs);
  hs.in("dout", outs, g.randn(numel(outs)));
  hs.out("din", is);
}

void forward(Kind k, OpRun& r) {
  const Dims& d = r.d;
  switch (k) {
    case Kind::partition: r.be.window_partition(r.t("out"), r.t("in"), gi(d.H), gi(d.W), gi(d.P), gi(d.n)); break;
    case Kind::reverse: r.be.window_reverse(r.t("out"), r.t("in"), gi(d.H), gi(d.W), gi(d.P), gi(d.n)); break;
    case Kind::merge: r.be.patch_merge(r.t("out"), r.t("in"), gi(d.H), gi(d.W)); break;
    case Kind::upsample: r.be.upsample_nearest(r.t("out"), r.t("in"), gi(d.H), gi(d.W)); break;
    case Kind::transpose: r.be.grid_transpose(r.t("out"), r.t("in"), gi(d.H), gi(d.W)); break;
  }
}
void backward(Kind k, OpRun& r) {
  const Dims& d = r.d;
  switch (k) {
    case Kind::partition: r.be.window_reverse(r.t("din"), r.t("dout"), gi(d.H), gi(d.W), gi(d.P), gi(d.n)); break;
    case Kind::reverse: r.be.window_partition(r.t("din"), r.t("dout"), gi(d.H), gi(d.W), gi(d.P), gi(d.n)); break;
    case Kind::merge: r.be.patch_split(r.t("din"), r.t("dout"), gi(d.H), gi(d.W)); break;
    case Kind::upsample: r.be.upsample_nearest_backward(r.t("din"), r.t("dout"), gi(d.H), gi(d.W)); break;
    case Kind::transpose: r.be.grid_transpose(r.t("din"), r.t("dout"), gi(d.W), gi(d.H)); break;
  }
}

void add_kind(std::vector<OpCase>& t, Kind k, const std::string& name, std::vector<Dims> shapes,
              std::vector<Dims> grad_shapes, std::vector<Dims> perf, uint32_t seed) {
  OpCase c;
  c.seed = seed;
  c.shapes = std::move(shapes);
  c.grad_shapes = std::move(grad_shapes);
  c.perf_shapes = std::move(perf);
  c.make = [k](const Dims& d, Precision, Gen& g, HostSet& hs) { inputs(k, d, g, hs); };
  const bool up = k == Kind::upsample;
  // bytes moved: the grid once and the other side once (upsample's is 4x the grid)
  c.work = [up](const Dims& d, size_t a) {
    return Work{0, static_cast<double>(d.B * tokens(d) * d.C) * (up ? 5.0 : 2.0) * static_cast<double>(a)};
  };
  c.name = name + "_fwd";
  c.run = [k](OpRun& r) { forward(k, r); };
  c.checks = {{"out", tol(1e-7)}};  // copies: exact in f32, one rounding in bf16/f16
  t.push_back(c);

  c.name = name + "_bwd";
  c.run = [k](OpRun& r) { backward(k, r); };
  // a copy, or (upsample) an fp32 sum of four rounded to the activation dtype once
  c.checks = {{"din", tol(up ? 1e-6 : 1e-7)}};
  c.grad.forward = [k](OpRun& r) { forward(k, r); };
  c.grad.fwd_out = "out";
  c.grad.cotangent = "dout";
  c.grad.wrt = {{"in", "din"}};
  t.push_back(c);
}

}  // namespace

void add_window_ops(std::vector<OpCase>& t) {
  // windows: 2 windows across x 1 down with C odd; shift w/2; an odd shift on a 3x2-window
  // grid; one window over the whole grid; CDEIT-like 16x16 grid of 4x4 windows, shift 2
  const std::vector<Dims> win = {grid(2, 4, 8, 5, 4, 0), grid(2, 8, 8, 16, 4, 2), grid(1, 6, 4, 3, 2, 1),
                                 grid(3, 4, 4, 8, 4, 0), grid(2, 16, 16, 72, 4, 2), grid(1, 12, 9, 7, 3, 2)};
  const std::vector<Dims> win_grad = {grid(2, 4, 4, 3, 2, 1), grid(1, 4, 6, 2, 2, 0)};
  const std::vector<Dims> win_perf = {grid(32, 64, 64, 512, 16, 8)};
  add_kind(t, Kind::partition, "window_partition", win, win_grad, win_perf, 41);
  add_kind(t, Kind::reverse, "window_reverse", win, win_grad, win_perf, 42);
  // merge / upsample: non-square, C odd and off the pack, CDEIT's 8x8 bottleneck
  const std::vector<Dims> g2 = {grid(2, 4, 6, 3), grid(1, 2, 2, 16), grid(3, 8, 8, 72), grid(2, 6, 2, 1)};
  const std::vector<Dims> g2_grad = {grid(2, 2, 4, 3), grid(1, 4, 4, 2)};
  add_kind(t, Kind::merge, "patch_merge", g2, g2_grad, {grid(32, 64, 64, 512)}, 43);
  add_kind(t, Kind::upsample, "upsample_nearest", g2, g2_grad, {grid(32, 32, 32, 512)}, 44);
  // transpose: the adaLN regrouping (a 1 x (b*6) grid of D-wide rows), non-square grids, C odd
  const std::vector<Dims> tr = {grid(1, 5, 6, 7), grid(2, 3, 4, 16), grid(1, 1, 4, 3), grid(3, 6, 2, 72)};
  add_kind(t, Kind::transpose, "grid_transpose", tr, {grid(1, 3, 2, 3), grid(2, 2, 3, 2)}, {grid(1, 256, 6, 384)},
           45);
}

}  // namespace ft::ops
