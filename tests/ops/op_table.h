// The op test table: every Backend op family declared once, run through any backend.
//
// In the manner of ggml's tests/test-backend-ops.cpp. An OpCase says which buffers an op
// reads and writes (with a seeded generator for their values), how to run it through a
// Backend&, which outputs to compare and how closely per precision, how its backward is
// checked by finite differences, and what its work is at GPT-2 124M sizes. The harness
// (op_table.cpp) gives every case three modes:
//   test: run on a backend in a precision and compare with the CPU backend in fp32 (the
//         reference) on the same inputs, rounded to that precision first;
//   grad: the CPU reference's backward against central finite differences of its forward;
//   perf: time the op at GPT-2 124M shapes and report ms and TFLOP/s or GB/s.
// Drivers: tests/ops/op_table_test.cpp (GoogleTest: OpTable.*, GPU_OpTable.*) and
// tests/ops/fittrain_ops.cpp (the fittrain_ops executable). No GoogleTest in here, so the
// executable does not need it: the harness reports failures as strings.
// How to add an op: docs/DESIGN.md, "Op tests: one table".
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace ft::ops {

// The sizes of one shape of a case. Each case reads the fields it needs; label() prints the
// non-default ones, so test output names the shape.
struct Dims {
  int64_t B = 1, T = 1, C = 0, OC = 0, NH = 0, V = 0, Vp = 0, maxT = 0, n = 0;
  int64_t K = 0;     // BPR head: negatives a row (the workspace is sized for OpShape::bpr)
  int64_t H = 0, W = 0, P = 0;  // images [B,C,H,W] cut into P x P patches (patchify)
  bool bias = true;  // matmul family: with or without the bias (and its gradient)
  bool silu_product = false;  // silu_matmul_fwd: size the workspace for CUDA's fused plans too
  // attention: AttentionOptions::causal, and whether the case passes seq_lens (i32[B], the
  // lengths seq_lens() gives)
  bool causal = true, varlen = false;
  // several samples packed into each row: the case passes per-token positions (i32[B,T], the
  // ones positions() gives) to the ops that take them (embedding, attention)
  bool packed = false;
  std::string label() const;
  std::vector<OpShape> op_shapes() const;  // what the backend sizes its workspace for
  OpShape attention() const;               // the attention op at these dims
  // window cases (ops_window, ops_norm_modulate, ops_dit): the grid H x W, window P, shift n;
  // P = 0: token order
  WindowOrder window_order() const;
  // A varlen shape's per-sample lengths: T, 1, T/2, 3T/4+1, repeating over b (so B >= 3 has
  // a full sample, a single token and one in between); every sample T long otherwise.
  std::vector<int32_t> seq_lens() const;
  // A packed shape's positions: each row cut into samples of lengths 5, 1, T/3+1, 2, ...
  // (the cycle starting at b, so rows differ; the last sample of a row is cut at T),
  // positions restarting at 0 at each sample's first token. 0..T-1 per row otherwise.
  std::vector<int32_t> positions() const;
};

// Storage of a buffer: `act` follows the precision under test (f32, bf16 or f16; the
// reference stores it as f32), `f32` is fp32 in every precision (statistics, losses, Adam
// moments, master weights), `i32` holds token ids and targets.
enum class Store { act, f32, i32 };
// in: read only. inout: read and written (accumulated gradients, in-place ops): uploaded
// with its values before each run. out: written only: filled with NaN before each run, so a
// value the op fails to write fails the comparison.
enum class Role { in, inout, out };

struct HostBuf {
  std::string name;
  Store store = Store::act;
  Role role = Role::in;
  std::vector<int64_t> shape;
  std::vector<float> f;    // values (Store::act, Store::f32)
  std::vector<int32_t> i;  // values (Store::i32)
  int64_t numel() const;
};

// Seeded value generator. Buffers past 4M elements repeat a 1M-element random block (the
// perf shapes need GiBs of inputs; the timing does not depend on the values).
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  std::vector<float> randn(int64_t n, float scale = 1.f);
  std::vector<float> randu(int64_t n, float lo, float hi);
  std::vector<int32_t> randint(int64_t n, int32_t hi);
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

// The buffers of one shape of a case, in declaration order (the op's input generator
// fills them).
struct HostSet {
  std::vector<HostBuf> bufs;
  HostBuf& add(std::string name, Store s, Role r, std::vector<int64_t> shape);
  HostBuf& in(std::string name, std::vector<int64_t> shape, std::vector<float> v,
              Store s = Store::act);
  HostBuf& inout(std::string name, std::vector<int64_t> shape, std::vector<float> v,
                 Store s = Store::act);
  HostBuf& out(std::string name, std::vector<int64_t> shape, Store s = Store::act);
  HostBuf& tokens(std::string name, std::vector<int64_t> shape, std::vector<int32_t> v);
  HostBuf* find(const std::string& name);
  const HostBuf* find(const std::string& name) const;
};

// What an op's run function sees: the backend, the storage dtype of `act` buffers on this
// run (f32 on the reference), its buffers as device tensors, scratch space, and a place for
// results that are not tensors (sum_squares' double).
class OpRun {
 public:
  virtual ~OpRun() = default;
  Backend& be;
  const Dims& d;
  DType act;
  OpRun(Backend& b, const Dims& dims, DType a) : be(b), d(dims), act(a) {}
  virtual Tensor t(const std::string& name) = 0;  // a declared buffer (throws if absent)
  virtual bool has(const std::string& name) const = 0;
  // an optional buffer: the declared one, or an empty tensor where the shape has none
  Tensor maybe(const std::string& name) { return has(name) ? t(name) : Tensor(); }
  virtual std::vector<double> read(const std::string& name) = 0;  // a buffer's values now
  // Device scratch of `bytes` (fp32 view of bytes/4 elements), NaN-filled, alive until the
  // run ends; e.g. attention's saved state, whose size differs per backend.
  virtual Tensor scratch(const std::string& name, size_t bytes) = 0;
  std::map<std::string, std::vector<double>> values;
};

using Tol = std::array<double, 3>;  // per precision: fp32, bf16, fp16
// bf16 keeps 8 mantissa bits, f16 11: f16 errors come out several times smaller, so its
// tolerance is half of bf16's (the rule today's GPU tests used).
inline Tol tol(double fp32) { return {fp32, 1e-2, 5e-3}; }

// One output compared after a `test` run: ||got - ref|| / ||ref|| < tol[precision] (the
// relative norm error, i.e. sqrt of ggml's normalised MSE), computed in double.
struct Check {
  std::string name;     // buffer (or OpRun::values entry) on the backend under test
  Tol tol = ::ft::ops::tol(1e-5);
  std::string ref;      // the reference's buffer, when it is another one (default: name)
  bool delta = false;   // compare the change from the buffer's initial values (AdamW)
  unsigned precisions = 7;  // bit p: checked in Precision p (AdamW's params vs master)
};

// The backward of a case against central finite differences (grad mode, CPU fp32 only):
// loss = sum(fwd_out * cotangent) of `forward`, and for each (input, gradient) pair the
// gradient written by `run` must match d loss / d input: for an accumulating gradient
// (Role::inout, random start) its change, for an overwritten one (Role::out, NaN start) its
// value, so += and = are checked too. A gradient may also name an input buffer, when the
// backward's gradient of that input is the input itself (the gated residual's: dout).
struct GradSpec {
  std::function<void(OpRun&)> forward;
  std::string fwd_out, cotangent;
  std::vector<std::pair<std::string, std::string>> wrt;
  double rtol = 1e-2, atol = 2e-3;
  float eps = 1e-3f;
};

// A run's results by buffer (or OpRun::values) name, as doubles.
using Values = std::map<std::string, std::vector<double>>;

struct Work {
  double flops = 0, bytes = 0;  // per call; TFLOP/s is reported when flops > 0, else GB/s
};

struct OpCase {
  std::string name;                    // e.g. "layernorm_bwd"
  std::vector<Dims> shapes;            // test mode (every shape today's tests used)
  std::vector<Dims> grad_shapes;       // grad mode: small, finite differences are O(n^2)
  std::vector<Dims> perf_shapes;       // perf mode: GPT-2 124M
  // Declares the buffers of one shape and fills the inputs (values as fp32; the harness
  // rounds `act` buffers to the precision under test before reference and backend see them).
  std::function<void(const Dims&, Precision, Gen&, HostSet&)> make;
  std::function<void(OpRun&)> run;
  // perf mode times this instead of `run` when set (after one `run`): a backward alone, with
  // the saved state its forward left (attention, layernorm)
  std::function<void(OpRun&)> timed;
  std::vector<Check> checks;
  std::function<Work(const Dims&, size_t act_bytes)> work;
  GradSpec grad;                       // grad.forward empty: the case has no grad mode
  // Extra assertions on the backend's results, with the host inputs at hand; returns
  // failures. For properties that are not closeness (exact zeros, untouched elements).
  std::function<std::vector<std::string>(const Dims&, Precision, const HostSet& inputs,
                                         const Values& got)>
      extra;
  bool deterministic = true;           // backend under test repeats bitwise (cuDNN's
                                       // attention backward does not: atomics)
  uint32_t seed = 1;
};

// The table, in a fixed order. One add_* per file of op declarations.
const std::vector<OpCase>& op_table();
const OpCase* find_op(const std::string& name);
void add_nn_ops(std::vector<OpCase>& t);          // ops_nn.cpp
void add_matmul_ops(std::vector<OpCase>& t);      // ops_matmul.cpp
void add_loss_optim_ops(std::vector<OpCase>& t);  // ops_loss_optim.cpp
void add_dit_ops(std::vector<OpCase>& t);         // ops_dit.cpp
void add_kv_ops(std::vector<OpCase>& t);          // ops_kv.cpp (generation)
void add_bpr_ops(std::vector<OpCase>& t);         // ops_bpr.cpp (recommender head)
void add_diffusion_ops(std::vector<OpCase>& t);   // ops_diffusion.cpp (DiT, CDEIT)
void add_window_ops(std::vector<OpCase>& t);      // ops_window.cpp (CDEIT's window stages)
void add_norm_modulate_ops(std::vector<OpCase>& t);  // ops_norm_modulate.cpp (fused adaLN input)

// ---- the harness (op_table.cpp) -------------------------------------------------------
DType act_dtype(Precision p);
Precision precision_of(DType act);  // what an OpRun's act dtype stands for
struct Result {
  std::vector<std::string> failures;  // empty: passed
  std::vector<std::string> notes;     // measured errors and timings, for the log
  bool skipped = false;
  std::string skip_reason;
};
// make_backend(DeviceKind) gives a fresh backend per shape (the CUDA backend reads its FT_*
// switches when created, and builds attention plans when asked for the workspace).
Result run_test(const OpCase& c, DeviceKind dev, Precision p);
Result run_grad(const OpCase& c);
Result run_perf(const OpCase& c, DeviceKind dev, Precision p, int reps = 10);

// The same at chosen shapes: for tests outside the table that check one backend path (an
// FT_* switch, set with a ScopedEnv around the call: backends are created inside) against
// the same reference.
Result run_test(const OpCase& c, DeviceKind dev, Precision p, const std::vector<Dims>& shapes);

// Relative norm error ||a - ref|| / ||ref||; infinity if anything in `a` is not finite.
double rel_err(const std::vector<double>& a, const std::vector<double>& ref);
float round_to(DType t, float x);

}  // namespace ft::ops
