// GPU sum_squares with inf/NaN gradients (what fp16's loss scaler relies on). Its values and
// AdamW's against the CPU reference: the op table (GPU_OpTable.sum_squares_*, adamw_*). The
// update decided on the device (sum_squares_to, set_scalars, update_control, AdamW reading
// the control) against the host rule and the plain update.
#include "gpu_test_util.h"

namespace ft::gputest {

// fp16's loss scaler skips a step when the gradients' sum of squares is not finite, so one
// inf or NaN anywhere (including the unvectorised tail) must make the result inf / NaN.
TEST(GPU_SumSquares, NonFiniteGradientsPropagate) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  GpuEnv env({1, 1, 64, 1, 64, 64});
  for (DType dt : kDtypes) {
    for (int64_t at : {int64_t(0), int64_t(777), int64_t(12344)}) {  // 12344: in the tail
      SCOPED_TRACE(std::string(dtype_name(dt)) + " at=" + std::to_string(at));
      const int64_t n = 12345;
      std::mt19937 g(9);
      auto x = round_to(dt, randn(n, g));
      Tensor tx = env.upload(dt, {n}, x);
      EXPECT_TRUE(std::isfinite(env.be().sum_squares(tx)));
      x[at] = INFINITY;
      env.put(tx, x);
      double s = env.be().sum_squares(tx);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
      x[at] = -INFINITY;
      env.put(tx, x);
      s = env.be().sum_squares(tx);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
      x[at] = NAN;
      env.put(tx, x);
      EXPECT_TRUE(std::isnan(env.be().sum_squares(tx)));
    }
    if (dt == DType::f16) {
      // A kernel result past fp16's range (65504) is stored as inf (not clamped to the
      // largest finite value), so such an overflow is seen too: 40000 + 40000 = inf.
      const int64_t n = 4096;
      std::vector<float> a(n, 1.f);
      a[100] = 40000.f;
      Tensor ta = env.upload(dt, {n}, a), tsum = env.tensor(dt, {n});
      env.be().residual_forward(tsum, ta, ta);
      EXPECT_TRUE(std::isinf(env.get(tsum)[100]));
      double s = env.be().sum_squares(tsum);
      EXPECT_TRUE(std::isinf(s) && s > 0) << s;
    }
  }
}

namespace {
std::vector<double> get_f64(GpuEnv& env, Tensor t) {
  env.be().synchronize();
  std::vector<double> v(static_cast<size_t>(t.numel()));
  env.be().copy_to_host(v.data(), t.data, t.bytes());
  return v;
}
}  // namespace

TEST(GPU_UpdateControl, MatchesTheHostRule) {
  GPU_SKIP_IF_NONE();
  GpuEnv env({1, 1, 64, 1, 64, 64});
  Backend& be = env.be();
  Tensor sums = env.tensor(DType::f64, {4}), control = env.tensor(DType::f32, {2});
  be.set_scalars(sums, std::vector<double>{2.5, 1.0, -3.0, 7.0});
  EXPECT_EQ(get_f64(env, sums), (std::vector<double>{2.5, 1.0, -3.0, 7.0}));
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(17);
    const int64_t n = 12345;
    Tensor x = env.upload(dt, {n}, round_to(dt, randn(n, g)));
    be.sum_squares_to(x, sums.range(2, 1));
    EXPECT_EQ(get_f64(env, sums)[2], be.sum_squares(x));  // bit for bit
    EXPECT_EQ(get_f64(env, sums)[1], 1.0);                // its neighbours untouched
  }
  be.sum_squares_to(Tensor(), sums.range(3, 1));
  EXPECT_EQ(get_f64(env, sums)[3], 0.0);
  // Strided runs (a rank's pieces of ZeRO-1's gradient layout): 5 runs of 256 elements, 1024
  // apart, against the sum over the runs in double on the host; the gaps hold huge values
  // that would show if read.
  for (DType dt : kDtypes) {
    SCOPED_TRACE(std::string("runs, ") + dtype_name(dt));
    std::mt19937 g(23);
    const int64_t runs = 5, len = 256, stride = 1024;
    std::vector<float> h = round_to(dt, randn(runs * stride, g));
    double want = 0;
    for (int64_t i = 0; i < runs * stride; ++i) {
      if (i % stride < len) want += double(h[static_cast<size_t>(i)]) * h[static_cast<size_t>(i)];
      else h[static_cast<size_t>(i)] = 1e4f;
    }
    Tensor x = env.upload(dt, {runs * stride}, h);
    be.sum_squares_runs_to(x.range(0, len), runs, stride, sums.range(2, 1));
    EXPECT_NEAR(get_f64(env, sums)[2], want, 1e-5 * want);
    be.sum_squares_runs_to(x.range(0, len), 1, stride, sums.range(3, 1));  // one run: sum_squares_to
    EXPECT_EQ(get_f64(env, sums)[3], be.sum_squares(x.range(0, len)));
  }
  struct Case {
    double loss, ss, max_norm, unscale;
    bool skip;
  };
  const Case cases[] = {{2.5, 16.0, 1.0, 1.0, false},    {2.5, 0.25, 1.0, 1.0, false},
                        {2.5, 3.0e7, 1.0, 1 / 1024., false}, {2.5, 1e6, 0.0, 1.0, false},
                        {NAN, 16.0, 1.0, 1.0, false},     {2.5, INFINITY, 1.0, 1.0, false},
                        {2.5, NAN, 0.0, 1.0, false},      {2.5, 16.0, 1.0, 1.0, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.loss) + " " + std::to_string(c.ss) + " " + std::to_string(c.max_norm));
    be.set_scalars(sums, std::vector<double>{c.loss, 0.0, c.ss});
    const UpdateRule r{c.max_norm, c.unscale, c.skip};
    be.update_control(sums.range(0, 1), sums.range(2, 1), control, r);
    float ref[2];
    update_control_host(c.loss, c.ss, r, ref);
    const std::vector<float> got = env.get(control);
    EXPECT_EQ(got[0], ref[0]);
    EXPECT_EQ(got[1], ref[1]);
  }
}

// AdamW with a control: control[0] is the gradient scale (the same bits as passing it), and
// control[1] == 0 leaves weights, master weights and moments as they were.
TEST(GPU_UpdateControl, AdamWReadsIt) {
  GPU_SKIP_IF_NONE();
  GpuEnv env({1, 1, 64, 1, 64, 64});
  Backend& be = env.be();
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(23);
    const int64_t n = 70001;
    const std::vector<float> w = randn(n, g), grad = randn(n, g), m0 = randn(n, g);
    const std::vector<float> v0(n, 0.02f);
    const ParamSlice sl[] = {{0, 40000, true}, {40000, n - 40000, false}};
    auto state = [&] {
      std::vector<Tensor> t = {env.upload(dt, {n}, round_to(dt, w)), env.upload(dt, {n}, round_to(dt, grad)),
                               env.upload(DType::f32, {n}, m0), env.upload(DType::f32, {n}, v0)};
      t.push_back(dt == DType::f32 ? Tensor() : env.upload(DType::f32, {n}, w));
      return t;
    };
    AdamWStep s;
    s.lr = 1e-3f;
    s.t = 3;
    s.grad_scale = 0.37f;
    std::vector<Tensor> a = state(), b = state();
    be.adamw_update(a[0], a[4], a[1], a[2], a[3], sl, s);
    Tensor control = env.upload(DType::f32, {2}, {0.37f, 1.f});
    AdamWStep sc = s;
    sc.grad_scale = 5.f;  // replaced by control[0]
    sc.control = control;
    be.adamw_update(b[0], b[4], b[1], b[2], b[3], sl, sc);
    for (int k : {0, 2, 3, 4})
      if (!a[k].empty()) EXPECT_EQ(env.get(a[k]), env.get(b[k])) << "tensor " << k;
    std::vector<Tensor> c = state();
    env.put(control, {0.37f, 0.f});
    be.adamw_update(c[0], c[4], c[1], c[2], c[3], sl, sc);
    EXPECT_EQ(env.get(c[0]), round_to(dt, w));
    EXPECT_EQ(env.get(c[2]), m0);
    EXPECT_EQ(env.get(c[3]), v0);
    if (!c[4].empty()) EXPECT_EQ(env.get(c[4]), w);
  }
}

}  // namespace ft::gputest
