// GPU embedding forward/backward vs a double-precision CPU reference.
#include "gpu_test_util.h"

namespace ft::gputest {

TEST(GPU_Embedding, ForwardBackwardMatchCpu) {
  if (!ft::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 3, T = 37, C = 64, Vp = 96, maxT = 48;
  GpuEnv env({B, T, C, 4, Vp, Vp - 5});
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 g(1);
    std::vector<int32_t> tok(B * T);
    std::uniform_int_distribution<int> ud(0, Vp - 1);
    for (auto& x : tok) x = ud(g);
    tok[5] = tok[9] = tok[40] = 7;  // repeated tokens exercise the scatter-add
    auto wte = round_to(dt, randn(Vp * C, g)), wpe = round_to(dt, randn(maxT * C, g));
    Tensor ttok = env.upload_i32({B, T}, tok);
    Tensor twte = env.upload(dt, {Vp, C}, wte), twpe = env.upload(dt, {maxT, C}, wpe);
    Tensor out = env.tensor(dt, {B, T, C});
    env.poison(out);
    env.be().embedding_forward(out, ttok, twte, twpe);
    std::vector<double> ref(B * T * C);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t c = 0; c < C; ++c)
        ref[bt * C + c] = (double)wte[tok[bt] * C + c] + wpe[(bt % T) * C + c];
    EXPECT_LT(rel_err(env.get(out), ref), tol(dt, 1e-6));

    // backward accumulates into random initial gradients
    auto dout = round_to(dt, randn(B * T * C, g));
    auto dwte0 = round_to(dt, randn(Vp * C, g)), dwpe0 = round_to(dt, randn(maxT * C, g));
    Tensor tdout = env.upload(dt, {B, T, C}, dout);
    Tensor tdwte = env.upload(dt, {Vp, C}, dwte0), tdwpe = env.upload(dt, {maxT, C}, dwpe0);
    env.be().embedding_backward(tdwte, tdwpe, tdout, ttok);
    std::vector<double> rwte(dwte0.begin(), dwte0.end()), rwpe(dwpe0.begin(), dwpe0.end());
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t c = 0; c < C; ++c) {
        rwte[tok[bt] * C + c] += dout[bt * C + c];
        rwpe[(bt % T) * C + c] += dout[bt * C + c];
      }
    EXPECT_LT(rel_err(env.get(tdwte), rwte), tol(dt, 1e-6));
    EXPECT_LT(rel_err(env.get(tdwpe), rwpe), tol(dt, 1e-6));

    // deterministic: a second run from the same start gives the same bits
    auto first = env.get(tdwte);
    env.put(tdwte, dwte0);
    env.be().embedding_backward(tdwte, tdwpe, tdout, ttok);
    EXPECT_EQ(env.get(tdwte), first);
  }
}

}  // namespace ft::gputest
