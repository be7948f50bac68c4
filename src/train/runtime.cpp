#include "train/runtime.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "plan/fit.h"
#include "train/grad_reducer.h"

namespace ft {

namespace {

struct EngineIds {
  BufferId params = kNoBuffer, grads = kNoBuffer, workspace = kNoBuffer, step = kNoBuffer;
  AdamWState::Ids opt;
};

// The engine's pinned buffers, in the order of the persistent prefix (params, grads, master,
// adam_m, adam_v), then the workspace.
EngineIds declare_engine(BufferTable& t, const Model& model, const Backend& be, const PlanShape& s) {
  const int64_t P = model.num_params();
  const size_t pbytes = dtype_size(param_dtype(s.precision));
  EngineIds ids;
  // ZeRO-1: the parameters are all-gathered in place, chunk by chunk, so the buffer holds the
  // shard layout's padded length (optim/shard_layout.h). The gradients too with several
  // ranks: reduce-scattered in place by chunk, or (replicated) each rank's part of the norm
  // read in the same pieces; the padding stays zero.
  const OptimizerShard sh = optimizer_shard(P, s, 0);
  const int64_t pelems = s.training && sh.sharded() ? sh.total() : P;
  ids.params = t.add_pinned("params", BufferClass::params, static_cast<size_t>(pelems) * pbytes);
  if (s.training) {
    const int64_t gelems = shard_layout(P, std::max(1, s.world_size), 0, shard_chunk_target()).total();
    ids.grads = t.add_pinned("grads", BufferClass::grads, static_cast<size_t>(gelems) * pbytes);
    ids.opt = AdamWState::declare(t, P, s, s.ema);
    // The step's scalars (queue_step_sums): sums f64 [kStepSums], then control f32 [2].
    ids.step = t.add_pinned("step_scalars", BufferClass::workspace, kStepScalarBytes);
  }
  const std::vector<OpShape> ops = model.ops(s);
  ids.workspace = t.add_pinned("workspace", BufferClass::workspace, be.workspace_bytes(ops, s.precision));
  return ids;
}

}  // namespace

MemoryPlan runtime_plan(const Model& model, const Backend& be, const PlanShape& s) {
  BufferTable t(model.num_phases());
  declare_engine(t, model, be, s);
  model.declare_buffers(t, s, be);
  return t.place();
}

ModelRuntime::ModelRuntime(Model& model, Backend& be, const PlanShape& s, Communicator* comm)
    : model_(model), be_(be), comm_(comm), shape_(s) {
  if (!comm_) {
    own_comm_ = make_single_process_communicator(be);
    comm_ = own_comm_.get();
  }
  FT_CHECK(comm_->world_size() == s.world_size, "plan for ", s.world_size, " ranks on a communicator of ",
           comm_->world_size());
  const int rank = comm_->rank();
  BufferTable t(model.num_phases());
  const EngineIds ids = declare_engine(t, model, be, s);
  model.keep_buffers(t, s, be);
  plan_ = t.place();
  arena_ = std::make_unique<Arena>(be, arena_layout(plan_));
  const int64_t P = model.num_params();
  const DType pd = param_dtype(s.precision);
  params_ = Tensor(arena_->pinned_ptr(ids.params), pd, {P});
  part_ = shard_layout(P, comm_->world_size(), rank, shard_chunk_target());
  if (s.training) {
    grads_ = Tensor(arena_->pinned_ptr(ids.grads), pd, {P});
    grad_buffer_ = Tensor(grads_.data, pd, {part_.total()});
    if (part_.total() > P) be.zero(grad_buffer_.range(P, part_.total() - P));  // never written again
    opt_.bind(*arena_, ids.opt, optimizer_shard(P, s, rank));
    char* step = static_cast<char*>(arena_->pinned_ptr(ids.step));
    sums_ = Tensor(step, DType::f64, {kStepSums});
    control_ = Tensor(step + kStepSums * sizeof(double), DType::f32, {2});
    sums_back_ = be.make_host_readback(kStepScalarBytes);
  }
  const size_t ws = plan_.buffers[static_cast<size_t>(ids.workspace)].bytes;
  be.set_workspace(arena_->pinned_ptr(ids.workspace), ws);
  slices_ = model.param_table().adamw_slices();
  ModelBinding binding{&be, arena_.get(), s, params_, grads_, {}};
  if (s.training) {
    uploads_ = std::make_unique<InputUploads>(be);
    binding.uploads = uploads_.get();
  }
  if (s.training && comm_->world_size() > 1) comm_stream_ = be.create_stream(GradReducer::stream_priority_from_env());
  if (s.training && sharded() && ParamGatherer::enabled_by_env()) {
    gatherer_ = std::make_unique<ParamGatherer>(be, *comm_, Tensor(params_.data, pd, {opt_.shard().total()}),
                                                opt_.shard(), comm_stream_);
    binding.params_needed = [this](std::span<const ParamRange> r) {
      gatherer_->on_needed(r);
      if (zero_pending_ && !gatherer_->in_flight()) zero_grads_now();  // the update has read them
    };
  }
  model.bind(binding);
}

ModelRuntime::~ModelRuntime() {
  if (comm_stream_.native) {
    // Nothing may still run on the stream when it goes (a failing device's error was
    // reported where it happened; a destructor does not throw it again).
    try {
      be_.synchronize_stream(comm_stream_);
    } catch (const std::exception&) {
    }
    gatherer_.reset();
    be_.destroy_stream(comm_stream_);
  }
}

void ModelRuntime::begin_params_load() {
  wait_params();
  be_.zero(params_);
  if (Tensor m = opt_.master(); !m.empty()) be_.zero(m);
}

void ModelRuntime::load_params_range(int64_t begin, const float* host, int64_t count) {
  FT_CHECK(begin >= 0 && count >= 0 && begin + count <= params_.numel(), "load_params_range [", begin, ", +", count,
           ") of ", params_.numel());
  if (params_.dtype == DType::f32) {
    be_.copy_to_device(static_cast<float*>(params_.data) + begin, host, static_cast<size_t>(count) * 4);
  } else {
    // Rounded a block at a time, in parallel, and uploaded from one block-sized buffer
    // (copy_to_device has copied it when it returns).
    std::vector<uint16_t> rounded(static_cast<size_t>(std::min(count, kWeightsBlock)));
    uint16_t* out = rounded.data();
    const DType dtype = params_.dtype;
    for (int64_t b = 0; b < count; b += kWeightsBlock) {
      const int64_t k = std::min(kWeightsBlock, count - b);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < k; ++i) out[i] = float_to_half_bits(dtype, host[b + i]);
      be_.copy_to_device(static_cast<uint16_t*>(params_.data) + begin + b, out, static_cast<size_t>(k) * 2);
    }
  }
  if (Tensor m = opt_.master(); !m.empty()) upload_shard_range(m, begin, host, count);
}

void ModelRuntime::upload_shard_range(Tensor shard, int64_t begin, const void* host, int64_t count) {
  const size_t esize = dtype_size(shard.dtype);
  opt_.shard().for_each_piece([&](int64_t g, int64_t l, int64_t n) {
    const int64_t lo = std::max(g, begin), hi = std::min(g + n, begin + count);
    if (lo < hi)
      be_.copy_to_device(static_cast<char*>(shard.data) + (l + lo - g) * esize,
                         static_cast<const char*>(host) + (lo - begin) * esize, static_cast<size_t>(hi - lo) * esize);
  });
}

void ModelRuntime::load_params_from_host(const float* host) {
  begin_params_load();
  load_params_range(0, host, params_.numel());
}

void ModelRuntime::init_params(uint64_t seed) {
  begin_params_load();
  const int64_t n = params_.numel();
  std::vector<float> block(static_cast<size_t>(std::min(n, kWeightsDrawBlock)));
  for (int64_t b = 0; b < n; b += kWeightsDrawBlock) {
    const int64_t k = std::min(kWeightsDrawBlock, n - b);
    model_.init_range(seed, b, k, block.data());
    load_params_range(b, block.data(), k);
  }
}

void ModelRuntime::master_from_params() {
  Tensor m = opt_.master();
  if (m.empty()) return;
  wait_params();
  be_.zero(m);
  const int64_t n = params_.numel();
  std::vector<float> block(static_cast<size_t>(std::min(n, kWeightsBlock)));
  for (int64_t b = 0; b < n; b += kWeightsBlock) {
    const int64_t k = std::min(kWeightsBlock, n - b);
    copy_to_host_f32(params_.range(b, k), block.data());
    upload_shard_range(m, b, block.data(), k);
  }
}

void ModelRuntime::copy_params_to_host(float* host) const {
  if (gatherer_) gatherer_->wait_all();
  Tensor m = opt_.master();
  // fp32 master weights when there are any (the whole layout on one rank)
  if (!m.empty() && !sharded()) copy_to_host_f32(m, host);
  else copy_to_host_f32(params_, host);
}

void ModelRuntime::copy_grads_to_host(float* host) const {
  if (gatherer_) gatherer_->wait_all();
  copy_to_host_f32(grads_, host);
}

void ModelRuntime::copy_to_host_f32(Tensor t, float* out) const {
  be_.synchronize();
  if (t.dtype == DType::f32) {
    be_.copy_to_host(out, t.data, t.bytes());
    return;
  }
  std::vector<uint16_t> h(static_cast<size_t>(t.numel()));
  be_.copy_to_host(h.data(), t.data, t.bytes());
  for (size_t i = 0; i < h.size(); ++i) out[i] = half_bits_to_float(t.dtype, h[i]);
}

void ModelRuntime::zero_grads() {
  grads_zeroed_ = true;
  // A model whose first micro-batch overwrites every gradient it writes needs the zeros once,
  // for the elements no op writes (Model::overwrites_every_grad).
  if (grads_cleared_ && model_.overwrites_every_grad()) return;
  // The last step's update may still be reading them on its own stream: zeroed once the
  // forward has waited for every group it gathers (binding.params_needed above).
  if (gatherer_ && gatherer_->in_flight()) zero_pending_ = true;
  else zero_grads_now();
}

void ModelRuntime::zero_grads_now() {
  be_.zero(grads_);
  zero_pending_ = false;
  grads_cleared_ = true;
}

double ModelRuntime::forward_backward(const Batch& batch, float dloss, const GradReadyFn& ready) {
  FT_CHECK(shape_.training && batch.size >= 1 && batch.size <= shape_.micro_batch, "micro-batch ", batch.size);
  // Right after zero_grads, every weight's product writes its gradient instead of adding to
  // zeros (each weight has one product per micro-batch; a tied weight's second gradient is
  // added after its first).
  const GradWrite gw = grads_zeroed_ ? GradWrite::overwrite : GradWrite::add;
  grads_zeroed_ = false;
  if (zero_pending_ && !gatherer_->in_flight()) zero_grads_now();
  const double loss = model_.forward_backward(batch, dloss, gw, ready);
  // The forward waited for every group (it names every parameter), so the gradients were
  // zeroed before the backward wrote them.
  FT_CHECK(!zero_pending_, "the forward did not wait for the last update's parameter gathers");
  return loss;
}

Tensor ModelRuntime::grad_part_first_piece() const {
  // Piece `rank` of the first chunk; the others follow every part_.chunk elements.
  return grad_buffer_.range(part_.rank * part_.piece(), part_.piece());
}

double ModelRuntime::grad_sum_squares_part() {
  double s = 0.0;
  for (int64_t c = 0; c < part_.chunks; ++c)
    s += be_.sum_squares(grad_buffer_.range(c * part_.chunk + part_.rank * part_.piece(), part_.piece()));
  return s;
}

void ModelRuntime::queue_step_sums(double loss, double stop, double units_ahead, const UpdateRule& rule,
                                   double out_of_memory) {
  FT_CHECK(!sums_.empty(), "queue_step_sums: not a training runtime");
  const double host[kStepSums] = {loss, stop, 0.0, units_ahead, out_of_memory};
  be_.set_scalars(sums_, host);
  Tensor ss = sums_.range(2, 1);
  be_.sum_squares_runs_to(grad_part_first_piece(), part_.chunks, part_.chunk, ss);
  comm_->all_reduce_sum(sums_);
  be_.update_control(sums_.range(0, 1), ss, control_, rule);
  sums_back_->start(sums_.data, kStepScalarBytes);
}

StepSums ModelRuntime::step_sums() {
  sums_back_->wait();
  const auto* p = static_cast<const char*>(sums_back_->data());
  double v[kStepSums];
  float c[2];
  std::memcpy(v, p, sizeof v);
  std::memcpy(c, p + sizeof v, sizeof c);
  return StepSums{v[0], v[1], v[2], v[3], v[4], c[1] != 0.f, c[0]};
}

void ModelRuntime::adamw_step(const AdamWStep& step) {
  arena_->set_phase(model_.optimizer_phase());
  if (gatherer_) {  // group by group on the gatherer's stream, each group's gather behind it
    AdamWStep beside = step;
    gatherer_->run([&](int64_t c0, int64_t c1, StreamHandle s) {
      beside.stream = s;
      opt_.step_chunks(be_, params_, grads_, slices_, beside, c0, c1);
    });
    return;
  }
  opt_.step(be_, params_, grads_, slices_, step);
  gather_params();  // every rank updated its pieces of the parameters; gather them all
}

void ModelRuntime::ema_update(float decay) {
  FT_CHECK(has_ema(), "ema_update: the plan has no EMA");
  wait_params();  // the update (another stream) wrote the weights it averages
  arena_->set_phase(model_.optimizer_phase());
  opt_.ema_update(be_, params_, decay);
}

void ModelRuntime::gather_params() {
  if (!sharded()) return;
  const OptimizerShard& sh = opt_.shard();
  const Tensor padded(params_.data, params_.dtype, {sh.total()});
  std::vector<Tensor> chunks;
  for (int64_t c = 0; c < sh.chunks; ++c) chunks.push_back(padded.range(c * sh.chunk, sh.chunk));
  comm_->all_gather_group(chunks);
}

void ModelRuntime::swap_in_ema() {
  FT_CHECK(has_ema() && !ema_in_, "swap_in_ema: ", has_ema() ? "already swapped in" : "the plan has no EMA");
  wait_params();
  // fp32 params are the only copy of the weights: kept in the gradient buffer (free between
  // steps; the next step's first micro-batch overwrites it), at their local positions. Master
  // weights keep themselves.
  const Tensor parked(grads_.data, DType::f32, {opt_.shard().padded});
  opt_.shard().for_each_piece([&](int64_t g, int64_t l, int64_t n) {
    Tensor mine = params_.range(g, n);
    if (opt_.master().empty()) be_.ema_update(parked.range(l, n), mine, 0.f);
    be_.ema_update(mine, opt_.ema().range(l, n), 0.f);
  });
  gather_params();
  ema_in_ = true;
}

void ModelRuntime::swap_out_ema() {
  FT_CHECK(ema_in_, "swap_out_ema: the EMA weights are not in");
  wait_params();
  // bf16/fp16 params are their master weights rounded to nearest (AdamW's and
  // load_params_from_host's rounding), so this restores them bit for bit.
  Tensor saved = opt_.master().empty() ? Tensor(grads_.data, DType::f32, {opt_.shard().padded}) : opt_.master();
  opt_.shard().for_each_piece(
      [&](int64_t g, int64_t l, int64_t n) { be_.ema_update(params_.range(g, n), saved.range(l, n), 0.f); });
  gather_params();
  ema_in_ = false;
}

void ModelRuntime::wait_params() {
  if (gatherer_) gatherer_->wait_all();
}

void ModelRuntime::gather_shard(Tensor shard, const GatherSink& sink) {
  const OptimizerShard& sh = opt_.shard();
  const int64_t P = sh.num_params, W = comm_->world_size(), p = sh.piece();
  FT_CHECK(shard.dtype == DType::f32 && !grads_.empty(), "gather_shard: ", shard.shape_str());
  // Host blocks of whole chunks, so that each is one contiguous range of the layout. Every
  // rank's local elements of a block's chunks ([c0 p, c1 p)) are all-gathered k at a time
  // into the gradient buffer (viewed as f32), rank after rank; each run of a rank's local
  // elements is contiguous in the layout and goes straight to its place in the block.
  const int64_t k = std::min<int64_t>(sh.padded, static_cast<int64_t>(grads_.bytes() / 4) / W);
  FT_CHECK(k >= 1, "gradient buffer too small to stage the optimizer state");
  const int64_t per_block = std::max<int64_t>(1, kWeightsBlock / sh.chunk);
  std::vector<float> block(sink ? static_cast<size_t>(std::min(per_block, sh.chunks) * sh.chunk) : 0);
  Tensor staging(grads_.data, DType::f32, {k * W});
  const auto* gathered = static_cast<const float*>(staging.data);
  for (int64_t c0 = 0; c0 < sh.chunks; c0 += per_block) {
    const int64_t c1 = std::min(sh.chunks, c0 + per_block), base = c0 * sh.chunk;
    for (int64_t off = c0 * p; off < c1 * p; off += k) {
      const int64_t n = std::min(k, c1 * p - off);
      comm_->all_gather(shard.range(off, n), staging.range(0, n * W));
      be_.synchronize();
      if (!sink) continue;  // this rank only takes part
      for (int r = 0; r < W; ++r)
        for (int64_t j = off; j < off + n;) {
          const int64_t run = std::min(off + n, (j / p + 1) * p) - j;
          be_.copy_to_host(block.data() + (sh.global_of(r, j) - base), gathered + r * n + (j - off),
                           static_cast<size_t>(run) * 4);
          j += run;
        }
    }
    if (sink && base < P) sink(base, block.data(), std::min(c1 * sh.chunk, P) - base);
  }
}

}  // namespace ft
