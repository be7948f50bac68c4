// The op table's harness: buffers on any backend, the test / grad / perf modes, and the
// comparison rules. The ops themselves are declared in ops_*.cpp.
#include "ops/op_table.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/half.h"

namespace ft::ops {

// ---- shapes, generator, host buffers -------------------------------------------------------

std::string Dims::label() const {
  std::ostringstream os;
  auto f = [&](const char* k, int64_t v, int64_t def) {
    if (v != def) os << (os.tellp() > 0 ? " " : "") << k << "=" << v;
  };
  f("B", B, 1), f("T", T, 1), f("C", C, 0), f("OC", OC, 0), f("NH", NH, 0), f("V", V, 0);
  f("Vp", Vp, 0), f("maxT", maxT, 0), f("n", n, 0), f("K", K, 0);
  f("H", H, 0), f("W", W, 0), f("p", P, 0);
  if (!bias) os << " no-bias";
  if (!causal) os << " non-causal";
  if (varlen) os << " varlen";
  if (packed) os << " packed";
  return os.str();
}

WindowOrder Dims::window_order() const {
  WindowOrder o;
  if (P > 0) o = {static_cast<int>(H), static_cast<int>(W), static_cast<int>(P), static_cast<int>(n)};
  return o;
}

OpShape Dims::attention() const {
  // NH = 0 outside attention: the CUDA backend then builds no cuDNN plan
  const int64_t t = std::max<int64_t>(T, maxT);
  return OpShape::attention(B, t, NH, NH > 0 && C % NH == 0 ? C / NH : 0, causal, varlen,
                            packed);
}

std::vector<int32_t> Dims::seq_lens() const {
  std::vector<int32_t> v(B, static_cast<int32_t>(T));
  if (!varlen) return v;
  const int32_t t = static_cast<int32_t>(T);
  const int32_t cycle[4] = {t, 1, std::max(1, t / 2), std::min(t, 3 * t / 4 + 1)};
  for (int64_t b = 0; b < B; ++b) v[b] = cycle[b % 4];
  return v;
}

std::vector<int32_t> Dims::positions() const {
  std::vector<int32_t> v(static_cast<size_t>(B * T));
  const int64_t cycle[4] = {5, 1, T / 3 + 1, 2};
  for (int64_t b = 0; b < B; ++b) {
    int64_t k = b, left = packed ? cycle[k % 4] : T;
    for (int64_t t = 0, pos = 0; t < T; ++t, ++pos, --left) {
      if (left == 0) pos = 0, left = cycle[++k % 4];
      v[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(pos);
    }
  }
  return v;
}

std::vector<OpShape> Dims::op_shapes() const {
  const int64_t t = std::max<int64_t>(T, maxT), N = B * t;
  // every width a case's products can have (the CUDA bias-gradient reduction sizes its
  // scratch per output width); the padded row width at least 64
  const int64_t vp = std::max({Vp, OC, int64_t(64)}), v = V > 0 ? V : vp;
  std::vector<OpShape> ops{OpShape::embedding(N, C), OpShape::sum_squares(0), attention(),
                           OpShape::classifier(N, v, vp)};
  if (C > 0) {
    ops.push_back(OpShape::layernorm(N, C));
    ops.push_back(OpShape::norm_modulate(B, t, C));
    for (int64_t oc : {C, 3 * C, 4 * C}) ops.push_back(OpShape::matmul(N, C, oc));
    ops.push_back(OpShape::elementwise(N * C, C));  // column sums over rows of C (SiLU's bias)
    ops.push_back(OpShape::patch_embed(N, K + n, C));  // its backward's column partials
    if (silu_product) ops.push_back(OpShape::silu_matmul(N, C, OC));
  }
  ops.push_back(OpShape::matmul(N, C, vp));
  if (K > 0) ops.push_back(OpShape::bpr(N, C, K));
  return ops;
}

static constexpr int64_t kTileAbove = 4 << 20, kTile = 1 << 20;

std::vector<float> Gen::randn(int64_t n, float scale) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  const int64_t m = n > kTileAbove ? kTile : n;
  for (int64_t i = 0; i < m; ++i) v[i] = dist(rng_);
  for (int64_t i = m; i < n; ++i) v[i] = v[i % m];
  return v;
}

std::vector<float> Gen::randu(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  const int64_t m = n > kTileAbove ? kTile : n;
  for (int64_t i = 0; i < m; ++i) v[i] = dist(rng_);
  for (int64_t i = m; i < n; ++i) v[i] = v[i % m];
  return v;
}

std::vector<int32_t> Gen::randint(int64_t n, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng_);
  return v;
}

int64_t HostBuf::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

HostBuf& HostSet::add(std::string name, Store s, Role r, std::vector<int64_t> shape) {
  HostBuf b;
  b.name = std::move(name);
  b.store = s;
  b.role = r;
  b.shape = std::move(shape);
  bufs.push_back(std::move(b));
  return bufs.back();
}
HostBuf& HostSet::in(std::string name, std::vector<int64_t> shape, std::vector<float> v, Store s) {
  HostBuf& b = add(std::move(name), s, Role::in, std::move(shape));
  b.f = std::move(v);
  return b;
}
HostBuf& HostSet::inout(std::string name, std::vector<int64_t> shape, std::vector<float> v,
                        Store s) {
  HostBuf& b = add(std::move(name), s, Role::inout, std::move(shape));
  b.f = std::move(v);
  return b;
}
HostBuf& HostSet::out(std::string name, std::vector<int64_t> shape, Store s) {
  return add(std::move(name), s, Role::out, std::move(shape));
}
HostBuf& HostSet::tokens(std::string name, std::vector<int64_t> shape, std::vector<int32_t> v) {
  HostBuf& b = add(std::move(name), Store::i32, Role::in, std::move(shape));
  b.i = std::move(v);
  return b;
}
HostBuf* HostSet::find(const std::string& name) {
  for (auto& b : bufs)
    if (b.name == name) return &b;
  return nullptr;
}
const HostBuf* HostSet::find(const std::string& name) const {
  return const_cast<HostSet*>(this)->find(name);
}

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    add_nn_ops(t);
    add_matmul_ops(t);
    add_loss_optim_ops(t);
    add_dit_ops(t);
    add_kv_ops(t);
    add_bpr_ops(t);
    add_diffusion_ops(t);
    add_window_ops(t);
    add_norm_modulate_ops(t);
    return t;
  }();
  return table;
}

const OpCase* find_op(const std::string& name) {
  for (const OpCase& c : op_table())
    if (c.name == name) return &c;
  return nullptr;
}

DType act_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

Precision precision_of(DType act) {
  return act == DType::bf16 ? Precision::bf16 : act == DType::f16 ? Precision::fp16 : Precision::fp32;
}

float round_to(DType t, float x) {
  return t == DType::f32 ? x : half_bits_to_float(t, float_to_half_bits(t, x));
}

double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---- buffers on a backend ------------------------------------------------------------------

namespace {

DType storage(Store s, DType act) {
  return s == Store::act ? act : s == Store::f32 ? DType::f32 : DType::i32;
}

Tensor make_tensor(void* p, DType t, const std::vector<int64_t>& shape) {
  Tensor x(p, t, {});
  for (int64_t s : shape) x.shape[x.ndim++] = s;
  return x;
}

// One run's buffers on one backend: each buffer is its own allocation (freed at the end),
// inputs uploaded with conversion, outputs NaN-filled.
class DevRun final : public OpRun {
 public:
  DevRun(Backend& b, const Dims& dims, DType a, const HostSet& hs) : OpRun(b, dims, a) {
    for (const HostBuf& h : hs.bufs) {
      Tensor x = make_tensor(nullptr, storage(h.store, act), h.shape);
      x.data = alloc(x.bytes());
      tensors_[h.name] = x;
      if (h.role == Role::out) poison(x);
      else upload(x, h);
    }
  }
  ~DevRun() override {
    for (void* p : allocs_) be.free(p);
  }
  Tensor t(const std::string& name) override {
    auto it = tensors_.find(name);
    FT_CHECK(it != tensors_.end(), "op table: no buffer ", name);
    return it->second;
  }
  bool has(const std::string& name) const override { return tensors_.count(name) > 0; }
  Tensor scratch(const std::string& name, size_t bytes) override {
    auto it = tensors_.find(name);
    if (it != tensors_.end()) return it->second;
    Tensor x(alloc(bytes), DType::f32, {static_cast<int64_t>(bytes / 4)});
    poison(x);
    return tensors_[name] = x;
  }
  void upload(Tensor x, const HostBuf& h) {
    FT_CHECK(x.numel() == h.numel(), "op table: ", h.name, " has ", h.numel(), " elements");
    if (x.dtype == DType::i32) {
      be.copy_to_device(x.data, h.i.data(), x.bytes());
    } else if (x.dtype == DType::f32) {
      be.copy_to_device(x.data, h.f.data(), x.bytes());
    } else {
      std::vector<uint16_t> bits(h.f.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_half_bits(x.dtype, h.f[i]);
      be.copy_to_device(x.data, bits.data(), x.bytes());
    }
  }
  std::vector<double> read(const std::string& name) override { return download(name); }
  std::vector<double> download(const std::string& name) {
    Tensor x = t(name);
    be.synchronize();
    std::vector<double> v(x.numel());
    if (x.dtype == DType::f32) {
      std::vector<float> h(v.size());
      be.copy_to_host(h.data(), x.data, x.bytes());
      std::copy(h.begin(), h.end(), v.begin());
    } else if (x.dtype == DType::i32) {
      std::vector<int32_t> h(v.size());
      be.copy_to_host(h.data(), x.data, x.bytes());
      std::copy(h.begin(), h.end(), v.begin());
    } else {
      std::vector<uint16_t> h(v.size());
      be.copy_to_host(h.data(), x.data, x.bytes());
      for (size_t i = 0; i < v.size(); ++i) v[i] = half_bits_to_float(x.dtype, h[i]);
    }
    return v;
  }
  void poison(Tensor x) {  // all-ones bytes: NaN in f32, bf16 and f16
    std::vector<uint8_t> h(x.bytes(), 0xff);
    be.copy_to_device(x.data, h.data(), h.size());
  }

 private:
  void* alloc(size_t bytes) {
    void* p = be.alloc(std::max<size_t>(bytes, 256));
    allocs_.push_back(p);
    return p;
  }
  std::map<std::string, Tensor> tensors_;
  std::vector<void*> allocs_;
};

// The workspace a backend asks for at these dims, owned here and handed to the backend.
struct Workspace {
  Backend& be;
  void* p = nullptr;
  Workspace(Backend& b, const Dims& d) : be(b) {
    // sized as for bf16 whatever the precision under test: the largest (cuDNN's plans)
    const std::vector<OpShape> ops = d.op_shapes();
    const size_t bytes = be.workspace_bytes(ops, Precision::bf16);
    p = bytes ? be.alloc(bytes) : nullptr;
    be.set_workspace(p, bytes);
  }
  // Destroyed before its backend, which keeps the pointer but is not used again (the CUDA
  // backend refuses a workspace under cuBLASLt's minimum, so it is not unset here).
  ~Workspace() {
    if (p) be.free(p);
  }
};

// The inputs of one shape, `act` buffers rounded to the precision's storage.
HostSet make_inputs(const OpCase& c, const Dims& d, Precision p, uint32_t seed) {
  Gen g(seed);
  HostSet hs;
  c.make(d, p, g, hs);
  const DType act = act_dtype(p);
  for (HostBuf& b : hs.bufs)
    if (b.store == Store::act && act != DType::f32)
      for (float& x : b.f) x = round_to(act, x);
  return hs;
}

// Runs the case once on `be` and returns every written buffer and value.
Values execute(const OpCase& c, Backend& be, const Dims& d, DType act, const HostSet& hs) {
  DevRun r(be, d, act, hs);
  c.run(r);
  Values out = r.values;
  for (const HostBuf& h : hs.bufs)
    if (h.role != Role::in) out[h.name] = r.download(h.name);
  return out;
}

const std::vector<double>* lookup(const Values& v, const std::string& name) {
  auto it = v.find(name);
  return it == v.end() ? nullptr : &it->second;
}

std::vector<double> minus_initial(std::vector<double> v, const HostSet& hs, const std::string& n) {
  if (const HostBuf* h = hs.find(n))
    for (size_t i = 0; i < v.size() && i < h->f.size(); ++i) v[i] -= h->f[i];
  return v;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string where(const OpCase& c, const Dims& d, const char* dev, Precision p) {
  return c.name + " [" + d.label() + "] " + dev + " " + precision_name(p);
}

// Bitwise, so that NaNs (a poisoned buffer the case does not write) compare equal.
bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

void test_shape(const OpCase& c, const Dims& d, size_t si, DeviceKind dev, Precision p,
                Result& res) {
  const HostSet hs = make_inputs(c, d, p, c.seed + 1000 * static_cast<uint32_t>(si));
  const std::string at = where(c, d, device_name(dev), p);
  Values ref;
  {
    auto cpu = make_backend(DeviceKind::cpu);
    Workspace ws(*cpu, d);
    ref = execute(c, *cpu, d, DType::f32, hs);
  }
  auto be = make_backend(dev);
  Workspace ws(*be, d);
  const DType act = act_dtype(p);
  // CUDA: twice against the reference (the first call of an overwriting product autotunes:
  // it times several algorithms on these operands), then a third run must repeat the second
  // bitwise. CPU: one run, which must equal the reference (also the CPU) bitwise.
  const bool cuda = dev == DeviceKind::cuda;
  std::vector<Values> got;
  for (int k = 0; k < (cuda ? 3 : 1); ++k) got.push_back(execute(c, *be, d, act, hs));
  std::string errs;
  for (const Check& ch : c.checks) {
    if (!(ch.precisions & (1u << static_cast<unsigned>(p)))) continue;
    const std::string rn = ch.ref.empty() ? ch.name : ch.ref;
    const std::vector<double>* r = lookup(ref, rn);
    if (!r || !lookup(got[0], ch.name)) continue;  // not declared in this precision
    std::vector<double> rv = ch.delta ? minus_initial(*r, hs, rn) : *r;
    for (int k = 0; k < (cuda ? 2 : 1); ++k) {
      std::vector<double> gv = *lookup(got[k], ch.name);
      if (ch.delta) gv = minus_initial(gv, hs, ch.name);
      const double e = rel_err(gv, rv);
      const double limit = cuda ? ch.tol[static_cast<int>(p)] : 0.0;
      if (k == 0) errs += " " + ch.name + fmt(" %.2e", e);
      if (!(cuda ? e < limit : gv == rv))
        res.failures.push_back(at + ": " + ch.name + (k ? " (second call)" : "") +
                               fmt(" rel err %.3e", e) + fmt(" > tol %.1e", limit));
    }
  }
  res.notes.push_back(at + ":" + errs);
  if (cuda && c.deterministic)
    for (const auto& [name, v] : got[1])
      if (!bit_equal(got[2].at(name), v)) res.failures.push_back(at + ": " + name + " not bitwise repeatable");
  if (c.extra)
    for (std::string& e : c.extra(d, p, hs, got[0])) res.failures.push_back(at + ": " + e);
}

}  // namespace

// ---- modes ---------------------------------------------------------------------------------

Result run_test(const OpCase& c, DeviceKind dev, Precision p, const std::vector<Dims>& shapes) {
  Result res;
  if (dev == DeviceKind::cpu && p != Precision::fp32) {
    res.skipped = true;
    res.skip_reason = "the CPU backend is fp32 only";
    return res;
  }
  if (dev == DeviceKind::cuda && !cuda_available()) {
    res.skipped = true;
    res.skip_reason = "no CUDA device";
    return res;
  }
  for (size_t si = 0; si < shapes.size(); ++si) {
    try {
      test_shape(c, shapes[si], si, dev, p, res);
    } catch (const std::exception& e) {
      res.failures.push_back(where(c, shapes[si], device_name(dev), p) + ": threw: " + e.what());
    }
  }
  return res;
}

Result run_test(const OpCase& c, DeviceKind dev, Precision p) {
  return run_test(c, dev, p, c.shapes);
}

Result run_grad(const OpCase& c) {
  Result res;
  const GradSpec& g = c.grad;
  if (!g.forward) {
    res.skipped = true;
    res.skip_reason = c.name + " has no backward to check";
    return res;
  }
  for (size_t si = 0; si < c.grad_shapes.size(); ++si) {
    const Dims& d = c.grad_shapes[si];
    const std::string at = where(c, d, "cpu", Precision::fp32) + " grad";
    try {
      HostSet hs = make_inputs(c, d, Precision::fp32, c.seed + 77 + static_cast<uint32_t>(si));
      auto be = make_backend(DeviceKind::cpu);
      Workspace ws(*be, d);
      // analytic: the run as declared, so an accumulating gradient (Role::inout) starts from
      // its random values and its change is the gradient (this checks +=), and an
      // overwritten one (Role::out) starts as NaN (this checks =); an in-place gradient (the
      // classifier's logits) is the buffer's final value
      Values analytic = execute(c, *be, d, DType::f32, hs);
      for (const auto& [x, gx] : g.wrt) {
        const HostBuf* b = hs.find(gx);
        if (x != gx && b && b->role == Role::inout) analytic[gx] = minus_initial(analytic[gx], hs, gx);
      }
      const HostBuf* cot = hs.find(g.cotangent);
      FT_CHECK(cot, "grad: no cotangent ", g.cotangent);
      // numeric: central differences of sum(fwd_out * cotangent), perturbing in place
      DevRun r(*be, d, DType::f32, hs);
      auto loss = [&] {
        g.forward(r);
        const std::vector<double> y = r.download(g.fwd_out);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += y[i] * cot->f[i];
        return s;
      };
      std::string errs;
      for (const auto& [x, gx] : g.wrt) {
        const HostBuf* hx = hs.find(x);
        if (!hx) continue;  // e.g. the bias of a no-bias shape
        float* px = static_cast<float*>(r.t(x).data);  // CPU: device memory is host memory
        // a gradient that is an input of the backward (the gated residual's: dout itself)
        if (!analytic.count(gx))
          if (const HostBuf* in = hs.find(gx)) analytic[gx].assign(in->f.begin(), in->f.end());
        const std::vector<double>& a = analytic.at(gx);
        std::vector<double> num(hx->f.size());
        for (size_t i = 0; i < num.size(); ++i) {
          const float x0 = hx->f[i];
          px[i] = x0 + g.eps;
          const double lp = loss();
          px[i] = x0 - g.eps;
          const double lm = loss();
          px[i] = x0;
          // divide by the step actually taken in fp32
          num[i] = (lp - lm) / (static_cast<double>(x0 + g.eps) - static_cast<double>(x0 - g.eps));
        }
        // elementwise |a - n| <= atol + rtol * max(|a|, |n|), and the whole tensor's norm
        int bad = 0;
        double d2 = 0, n2 = 0;
        for (size_t i = 0; i < num.size(); ++i) {
          d2 += (a[i] - num[i]) * (a[i] - num[i]);
          n2 += num[i] * num[i];
          if (std::fabs(a[i] - num[i]) > g.atol + g.rtol * std::max(std::fabs(a[i]), std::fabs(num[i])))
            if (++bad <= 3)
              res.failures.push_back(at + ": d" + x + "[" + std::to_string(i) + "] analytic " +
                                     fmt("%.6g", a[i]) + " vs numeric " + fmt("%.6g", num[i]));
        }
        if (bad) res.failures.push_back(at + ": " + std::to_string(bad) + " of " +
                                        std::to_string(num.size()) + " elements of " + gx + " differ");
        if (std::sqrt(d2) > g.rtol * std::sqrt(n2) + g.atol)
          res.failures.push_back(at + ": " + gx + " relative norm error");
        errs += " " + gx + fmt(" %.2e", std::sqrt(d2 / std::max(n2, 1e-300)));
      }
      res.notes.push_back(at + ":" + errs);
    } catch (const std::exception& e) {
      res.failures.push_back(at + ": threw: " + e.what());
    }
  }
  return res;
}

Result run_perf(const OpCase& c, DeviceKind dev, Precision p, int reps) {
  Result res;
  if (dev == DeviceKind::cpu && p != Precision::fp32) {
    res.skipped = true;
    res.skip_reason = "the CPU backend is fp32 only";
    return res;
  }
  for (const Dims& d : c.perf_shapes) {
    const std::string at = where(c, d, device_name(dev), p);
    try {
      const HostSet hs = make_inputs(c, d, p, c.seed);
      auto be = make_backend(dev);
      Workspace ws(*be, d);
      DevRun r(*be, d, act_dtype(p), hs);
      c.run(r);  // warm-up (and autotuning); leaves the state `timed` needs
      const auto& f = c.timed ? c.timed : c.run;
      f(r);
      be->synchronize();
      // median of 3 batches of `reps` calls
      double ms[3];
      for (double& m : ms) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f(r);
        be->synchronize();
        m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
      }
      std::sort(ms, ms + 3);
      const Work w = c.work ? c.work(d, dtype_size(act_dtype(p))) : Work{};
      char line[256];
      if (w.flops > 0)
        std::snprintf(line, sizeof line, "%-26s %-40s %9.3f ms %8.1f TFLOP/s", c.name.c_str(),
                      d.label().c_str(), ms[1], w.flops / ms[1] / 1e9);
      else
        std::snprintf(line, sizeof line, "%-26s %-40s %9.3f ms %8.1f GB/s", c.name.c_str(),
                      d.label().c_str(), ms[1], w.bytes / ms[1] / 1e6);
      res.notes.push_back(line);
    } catch (const std::exception& e) {
      res.failures.push_back(at + ": threw: " + e.what());
    }
  }
  return res;
}

}  // namespace ft::ops
