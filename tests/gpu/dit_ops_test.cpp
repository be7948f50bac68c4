// GPU SiLU, adaLN modulation and gated residual called in place, as backend.h allows (out ==
// inp, dinp == dout; modulate out == x, dx == dout; gated residual out == res, dy == y), each
// against the CPU reference making the same aliased call (whose aliasing tests/backend/
// dit_ops_test.cpp checks bitwise against the out-of-place call). The ops themselves (every
// dtype, packed and element paths, deterministic sums) are the op table's:
// GPU_OpTable.{silu,modulate,gated_residual}_{fwd,bwd}_*.
#include <cstdio>

#include "gpu_test_util.h"
#include "ops/op_table.h"

namespace ft::gputest {

namespace {

using ops::OpRun;

// Table case `op` at its test shapes with `run` in place of its own: the op writes into input
// buffers `into`, which become Role::inout (uploaded before each run, compared after).
ops::OpCase aliased(const char* op, const std::vector<std::string>& into, std::function<void(OpRun&)> run,
                    std::vector<ops::Check> checks) {
  const ops::OpCase* found = ops::find_op(op);
  EXPECT_NE(found, nullptr) << op;
  ops::OpCase c = *found;
  std::string names;
  for (const std::string& n : into) names += (names.empty() ? "" : ", ") + n;
  c.name += " in place (" + names + ")";
  auto make = c.make;
  c.make = [make, into](const ops::Dims& d, Precision p, ops::Gen& g, ops::HostSet& hs) {
    make(d, p, g, hs);
    for (const std::string& n : into) {
      ops::HostBuf* b = hs.find(n);
      FT_CHECK(b, "no buffer ", n);
      b->role = ops::Role::inout;
    }
  };
  c.run = std::move(run);
  c.checks = std::move(checks);
  c.grad = {};
  return c;
}

void expect_ok(const ops::Result& r) {
  for (const auto& n : r.notes) std::printf("  %s\n", n.c_str());
  for (const auto& f : r.failures) ADD_FAILURE() << f;
}

}  // namespace

TEST(GPU_DitOps, InPlaceMatchesCpu) {
  GPU_SKIP_IF_NONE();
  using ops::tol;
  const ops::OpCase cases[] = {
      aliased("silu_fwd", {"x"}, [](OpRun& r) { r.be.silu_forward(r.t("x"), r.t("x")); },
              {{"x", tol(1e-5)}}),
      aliased("silu_bwd", {"dout"},
              [](OpRun& r) { r.be.silu_backward(r.t("dout"), r.t("x"), r.t("dout")); },
              {{"dout", tol(1e-5)}}),
      // as CDEIT calls it: the gradient over dout, silu(x) over x
      aliased("silu_bwd_recompute", {"x", "dout"},
              [](OpRun& r) {
                r.be.silu_backward_recompute(r.t("dout"), r.t("x"), r.t("x"), r.t("dout"));
              },
              {{"dout", tol(1e-5)}, {"x", tol(1e-5)}}),
      aliased("modulate_fwd", {"x"},
              [](OpRun& r) {
                r.be.modulate_forward(r.t("x"), r.t("x"), r.t("shift"), r.t("scale"));
              },
              {{"x", tol(1e-6)}}),
      aliased("modulate_bwd", {"dout"},
              [](OpRun& r) {
                r.be.modulate_backward(r.t("dout"), r.t("dshift"), r.t("dscale"), r.t("dout"),
                                       r.t("x"), r.t("scale"));
              },
              {{"dout", tol(1e-6)}, {"dshift", tol(1e-5)}, {"dscale", tol(1e-5)}}),
      aliased("gated_residual_fwd", {"res"},
              [](OpRun& r) {
                r.be.gated_residual_forward(r.t("res"), r.t("res"), r.t("y"), r.t("gate"));
              },
              {{"res", tol(1e-6)}}),
      aliased("gated_residual_bwd", {"y"},
              [](OpRun& r) {
                r.be.gated_residual_backward(r.t("y"), r.t("dgate"), r.t("dout"), r.t("y"),
                                             r.t("gate"));
              },
              {{"y", tol(1e-6)}, {"dgate", tol(1e-5)}}),
  };
  for (const ops::OpCase& c : cases)
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
      expect_ok(ops::run_test(c, DeviceKind::cuda, p));
}

}  // namespace ft::gputest
