#include "train/session.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/batch.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"
#include "models/registry.h"
#include "train/hf_interchange.h"
#include "train/rec_task.h"
#include "train/run_checks.h"
#include "train/step_guard.h"

namespace ft {

int64_t parse_auto_int(const std::string& text, const std::string& flag) {
  if (text == "auto") return 0;
  try {
    size_t pos = 0;
    long long v = std::stoll(text, &pos);
    if (pos == text.size() && v >= 1) return v;
  } catch (...) {
  }
  throw UserError(flag + " must be 'auto' or a positive integer, got '" + text + "'");
}

nlohmann::json resolve_model_config(const RunConfig& rc) {
  // --init-from: config.json gives the shape (model flags may only agree with it).
  if (!rc.init_from.empty()) return init_from_model_config(rc);
  nlohmann::json c = preset_config(rc.model);
  auto override_if = [&](int v, const char* key, const char* flag) {
    FT_USER_CHECK(v >= 0, flag, " must be positive, got ", v);
    if (v == 0) return;
    FT_USER_CHECK(c.contains(key), flag, " does not apply to model family ", c.value("arch", "?"));
    c[key] = v;
  };
  // The DiT names its shape after the paper (depth, heads, hidden); the flags are the same.
  const bool dit = c.value("arch", "") == "dit";
  override_if(rc.n_layer, dit ? "depth" : "n_layer", "--n-layer");
  override_if(rc.n_head, dit || c.value("arch", "") == "cdeit" ? "heads" : "n_head", "--n-head");
  override_if(rc.n_embd, dit ? "hidden" : "n_embd", "--n-embd");
  override_if(rc.image_size, "image", "--image-size");
  override_if(rc.patch_size, "patch", "--patch-size");
  if (!rc.cond.empty()) {
    FT_USER_CHECK(dit, "--cond applies to the diffusion model (--model dit-*), not to model family ",
                  c.value("arch", "?"));
    FT_USER_CHECK(rc.cond == "vector" || rc.cond == "channel" || rc.cond == "none", "--cond must be vector, channel ",
                  "or none, got '", rc.cond, "'");
    const int dim = c.value("cond_dim", 0) > 0 ? c.value("cond_dim", 0) : 208;  // EIT's 208 voltages
    c["cond_channels"] = rc.cond == "channel" ? 1 : 0;
    c["cond_dim"] = rc.cond == "vector" ? dim : 0;
  }
  override_if(rc.seq_len, "seq_len", "--seq-len");
  override_if(rc.vocab_size, "vocab_size", "--vocab-size");
  if (c.value("arch", "") == "gpt2rec") {
    FT_USER_CHECK(rc.negatives >= 0, "--negatives must be positive, got ", rc.negatives);
    if (rc.negatives > 0) c["negatives"] = rc.negatives;
    if (!rc.rec_loss.empty()) c["loss"] = rc.rec_loss;
    // The item table is the data's: its item count, read from the prepared interactions.
    if (!rc.data_path.empty()) c["items"] = rec_data_items(rc.data_path, "--data-path");
  } else {
    FT_USER_CHECK(rc.negatives == 0 && rc.rec_loss.empty(), rc.negatives ? "--negatives" : "--rec-loss",
                  " applies to the recommender (--model gpt2rec or sasrec), not to model family ", c.value("arch", "?"));
  }
  return c;
}

Session::Session(const RunConfig& rc, bool training, const nlohmann::json* model_config)
    : rc_(rc), training_(training) {
  model_ = model_config ? make_model(*model_config, "checkpoint") : make_model(resolve_model_config(rc_), "--model");
  // The chat task packs several samples into each row (train/chat_task.h).
  FT_USER_CHECK(model_->set_packed_inputs(rc_.task == "chat"), "--task chat: model family ", model_->family(),
                " cannot read samples packed into rows");
  DeviceKind kind;
  if (rc_.device == "auto") kind = cuda_available() ? DeviceKind::cuda : DeviceKind::cpu;
  else if (rc_.device == "cpu") kind = DeviceKind::cpu;
  else if (rc_.device == "cuda") kind = DeviceKind::cuda;
  else throw UserError("--device must be auto, cpu or cuda, got '" + rc_.device + "'");
  // One process per GPU: a rank started by fittrain's launcher is told its device; one
  // started by mpirun/srun takes its rank on this machine modulo the GPUs it sees.
  placement_ = rank_placement_from_env();
  int ordinal = rc_.cuda_device;
  if (kind == DeviceKind::cuda && placement_.launcher != RankPlacement::Launcher::none) {
    const int n = cuda_devices();
    FT_USER_CHECK(n > 0, "--device cuda: no CUDA device is visible to rank ", placement_.rank);
    ordinal = placement_.device >= 0 ? placement_.device : placement_.local_rank % n;
    placement_.device = ordinal;
  }
  backend_ = make_backend(kind, ordinal);
  placement_.generation = rc_.replans;
  // MPI checks it wires the ranks the launcher named, and counts those on this machine.
  if (placement_.launcher == RankPlacement::Launcher::mpi)
    placement_.local_world = mpi_join(placement_.rank, placement_.world, rc_.comm_timeout);
  comm_ = make_communicator(*backend_, placement_, rc_.comm_timeout);  // NCCL/MPI when launched as several ranks
  if (comm_->world_size() > 1) agree_on_settings();
  // NCCL's buffers are held for the whole run outside the arena: part of the runtime.
  if (comm_->world_size() > 1) backend_->measure_runtime_again();

  if (rc_.precision == "auto") precision_ = kind == DeviceKind::cuda ? Precision::bf16 : Precision::fp32;
  else if (rc_.precision == "fp32") precision_ = Precision::fp32;
  else if (rc_.precision == "bf16") precision_ = Precision::bf16;
  else if (rc_.precision == "fp16") precision_ = Precision::fp16;
  else throw UserError("--precision must be auto, fp32, bf16 or fp16, got '" + rc_.precision + "'");
  FT_USER_CHECK(kind != DeviceKind::cpu || precision_ == Precision::fp32,
                "--precision ", precision_name(precision_), " is not supported on the CPU (use fp32)");

  // The ranks started on this machine share its memory. (`plan --ranks N` in one process
  // plans for ranks it does not start, maybe elsewhere: the host plan per rank is printed,
  // and each rank of the run checks its own share.)
  budget_.local_ranks = placement_.local_world;
  const std::string shared_by =
      budget_.local_ranks > 1 ? ", shared by the " + std::to_string(budget_.local_ranks) + " ranks on this machine" : "";
  // What the process holds already (libraries, CUDA's and NCCL's host side) is measured, as
  // the device runtime is: the host plan counts it, so its total is the process's.
  budget_.host_runtime_bytes = host_rss_bytes();
  size_t host_total = 0, host_avail = 0;
  host_memory_info(&host_avail, &host_total);
  if (!rc_.host_memory_limit.empty()) {
    budget_.host_bytes = parse_bytes(rc_.host_memory_limit, "--host-memory-limit");
    budget_.host_source = "--host-memory-limit " + rc_.host_memory_limit;
  } else {
    // Available memory already excludes what this process holds: the process may hold that
    // and its share of the rest.
    budget_.host_bytes = shared_host_budget(host_avail, host_total, budget_.local_ranks) + budget_.host_runtime_bytes;
    budget_.host_source = "available host memory less a margin of max(256 MiB, 2%)" + shared_by;
  }
  backend_->mem_info(&budget_.device_free, &budget_.device_total);
  const size_t free_budget = free_memory_budget(budget_.device_free, budget_.device_total);
  // What the process holds on the device outside the arena (context, library handles, their
  // lazily loaded kernels): part of the plan, so the budget bounds the whole process.
  budget_.runtime_bytes = backend_->runtime_device_bytes();
  // One process planning several GPU ranks (`plan --ranks N`) has no communicator whose
  // buffers it could measure, as a run does once NCCL has started: estimate them, so the plan
  // is not larger than the run's.
  if (kind == DeviceKind::cuda && rc_.plan_ranks > 1 && comm_->world_size() == 1) {
    budget_.comm_estimate_bytes = nccl_device_bytes_estimate();
    budget_.runtime_bytes += budget_.comm_estimate_bytes;
    budget_.host_comm_estimate_bytes = nccl_host_bytes_estimate();
  }
  if (rc_.replan_below_bytes > 0) {
    // Re-planning after an allocation failed mid-run: what is free now, and strictly less
    // than the plan that ran out.
    budget_.device_bytes = std::min(free_budget, rc_.replan_below_bytes - 1) + budget_.runtime_bytes;
    if (!rc_.memory_limit.empty())
      budget_.device_bytes = std::min(budget_.device_bytes, parse_bytes(rc_.memory_limit, "--memory-limit"));
    budget_.source = "re-planned after running out of memory mid-run";
  } else if (!rc_.memory_limit.empty()) {
    budget_.device_bytes = parse_bytes(rc_.memory_limit, "--memory-limit");
    budget_.source = "--memory-limit " + rc_.memory_limit;
    FT_USER_CHECK(budget_.device_bytes > budget_.runtime_bytes, "--memory-limit ", rc_.memory_limit,
                  " is below what the process holds before planning anything (", format_bytes(budget_.runtime_bytes),
                  ": CUDA context and library handles)");
  } else {
    // The free memory already excludes the context and handles: the arena may take it less
    // the margin, and the process total is that plus the runtime.
    budget_.device_bytes = free_budget + budget_.runtime_bytes;
    budget_.source = kind == DeviceKind::cpu
                         ? "available host memory less a margin of max(256 MiB, 2%)" + shared_by
                         : "free device memory less a margin of max(256 MiB, 2%)";
  }
}

size_t Session::free_memory_budget(size_t free_bytes, size_t total_bytes) const {
  // On the CPU the arena lives in host memory: each rank on this machine plans its share of it.
  return backend_->device() == DeviceKind::cpu ? shared_host_budget(free_bytes, total_bytes, budget_.local_ranks)
                                               : default_budget(free_bytes, total_bytes);
}

const FitResult& Session::fit() {
  if (fit_) return *fit_;
  model_->check_supported(*backend_, precision_);
  const size_t hf_bytes = init_from_bytes();  // reads --init-from's config.json once
  const Model* model = model_.get();
  const Backend* be = backend_.get();
  PlanFunction fn = [model, be](const PlanShape& s) { return runtime_plan(*model, *be, s); };
  PlanShape base;
  base.precision = precision_;
  // `plan --ranks N` (or the GPUs --devices picks) plans one rank of N without starting them.
  const int world = rc_.plan_ranks > 0 ? rc_.plan_ranks : comm_->world_size();
  base.world_size = world;
  base.training = training_;
  base.ema = training_ && ema_enabled(rc_);  // the EMA buffer, in the plan like m and v
  const size_t sample_bytes = ft::sample_bytes(model_->input_fields());
  const size_t loss_floats = static_cast<size_t>(model_->loss_values_per_sample());
  // Batches so large that sizes would overflow are refused before anything is planned with
  // them (every batch size below is at most one of these two).
  const int64_t max_batch = max_plannable_batch(fn, base, model_->has_item_cache());
  FT_USER_CHECK(rc_.global_batch_size <= max_batch, "--global-batch-size ", rc_.global_batch_size,
                " is too large: planning it would overflow (at most ", max_batch, " samples for this model)");
  const int64_t eval_flag = parse_auto_int(rc_.eval_batch_size, "--eval-batch-size");
  FT_USER_CHECK(eval_flag <= max_batch, "--eval-batch-size ", eval_flag,
                " is too large: planning it would overflow (at most ", max_batch, " samples for this model)");

  FitRequest req;
  req.budget = budget_.arena_bytes();
  req.budget_source = budget_.source;
  if (budget_.runtime_bytes)
    req.budget_source += " less " + format_bytes(budget_.measured_runtime_bytes()) + " of CUDA runtime";
  if (budget_.comm_estimate_bytes)
    req.budget_source += " and an estimated " + format_bytes(budget_.comm_estimate_bytes) + " of NCCL buffers";
  if (backend_->device() == DeviceKind::cpu && rc_.memory_limit.empty()) {
    // On the CPU the arena is host memory: it and the host plan share the host budget (the
    // whole process: --host-memory-limit, or this rank's share of what is available). The host
    // buffers are counted at the largest micro-batch the arena alone could take there (a
    // bound: the batch fitted beside them is no larger), not at the whole global batch.
    const size_t held = budget_.host_runtime_bytes, own = req.budget;
    // The largest share of the global batch (rank 0's).
    const auto cap = static_cast<int64_t>(rank_share(static_cast<uint64_t>(rc_.global_batch_size), std::max(1, world), 0));
    // The smallest arena a batch can have gives its largest batch: recompute, the optimizer
    // state sharded when there are ranks to shard it over, and the recommender's item table
    // either way (dropping it saves the catalogue's rows, keeping it saves the batch's).
    std::vector<PlanShape> leanest;
    for (int zero : {0, 1})
      for (bool table : {true, false}) {
        if ((zero == 1 && (world < 2 || !training_)) || (!table && !model_->has_item_cache())) continue;
        PlanShape lean = base;
        lean.recompute = Recompute::block;
        lean.zero_stage = zero;
        lean.item_cache = table;
        leanest.push_back(lean);
      }
    // The host plan at the largest micro-batch the arena alone could take under a host budget
    // of `limit` (training and evaluation micro-batches: the evaluation's, with no gradients,
    // can be larger), without what the process holds.
    auto host_buffers_at = [=, this](size_t limit) {
      const size_t alone = std::min(own, limit > held ? limit - held : 0);
      PlanShape lean = base;
      int64_t most = 1;
      for (const PlanShape& l : leanest)
        most = std::max({most, training_ ? largest_fitting(fn, l, cap, alone, false) : 0,
                         largest_fitting(fn, l, std::max(cap, eval_flag), alone, true)});
      lean.micro_batch = lean.eval_batch = most;
      return host_plan(model_->num_params(), sample_bytes, loss_floats, lean, backend_->upload_staging_bytes(),
                       backend_->first_step_host_allowance(), hf_bytes)
          .total();
    };
    const size_t buffers = host_buffers_at(budget_.host_bytes);
    // Planning itself grows the resident set (the plans' own bookkeeping): counted as held.
    budget_.host_runtime_bytes = std::max(held, host_rss_bytes());
    const size_t runtime = budget_.host_runtime_bytes, host = runtime + buffers;
    // The arena beside the host plan (a re-plan's cap, below the plan that ran out, may be less).
    if (budget_.host_bytes < host + req.budget) {
      req.budget = budget_.host_bytes > host ? budget_.host_bytes - host : 0;
      if (rc_.replan_below_bytes == 0 && !rc_.host_memory_limit.empty()) {
        req.budget_source = budget_.host_source;
        // The limit that fits an arena: the host buffers grow with the limit (a larger batch
        // fits the arena alone), so the least L with L >= arena + runtime + buffers(L), from
        // below (buffers(L) grows with L and stops growing at the global batch). None (0) when
        // the arena is more than this rank's share of the available memory: no limit gives it that.
        // The runtime is this process's measured resident set, which the next process (the
        // re-run with the value named) measures again: under mpirun two CPU ranks of one run
        // measured 39 and 42 MiB, and a re-run's rank can fault in more than the MiB the
        // rounding used to leave (session 49: the value named was refused once on re-run). So
        // the value named carries an eighth of the runtime, at least 2 MiB, beside it.
        req.limit_for_arena = [host_buffers_at, runtime, own](size_t arena) -> size_t {
          if (arena > own) return 0;
          size_t limit = arena;
          for (int i = 0; i < 64; ++i) {
            const size_t need = arena + runtime + host_buffers_at(limit);
            if (need <= limit) break;
            limit = need;
          }
          return limit + std::max<size_t>(size_t{2} << 20, runtime / 8);
        };
        req.budget_flag = "--host-memory-limit";
      }
      req.budget_source += " less " + format_bytes(host) + " of host buffers and runtime";
    }
  }
  req.eval_batch = eval_flag;
  if (training_) {
    req.global_batch = rc_.global_batch_size;
    req.micro_batch = parse_auto_int(rc_.micro_batch_size, "--micro-batch-size");
    req.grad_accum = rc_.grad_accum_steps;
    if (rc_.recompute == "none") req.recompute = Recompute::none;
    else if (rc_.recompute == "block") req.recompute = Recompute::block;
    else FT_USER_CHECK(rc_.recompute == "auto", "--recompute must be auto, none or block, got '", rc_.recompute, "'");
    if (rc_.zero_stage != "auto") {
      FT_USER_CHECK(rc_.zero_stage == "0" || rc_.zero_stage == "1", "--zero-stage must be auto, 0 or 1, got '",
                    rc_.zero_stage, "'");
      req.zero_stage = rc_.zero_stage == "1" ? 1 : 0;
      FT_USER_CHECK(req.zero_stage == 0 || world > 1, "--zero-stage 1 shards the optimizer state over ",
                    "ranks, and this run has one (", comm_->describe(), ")");
    }
    req.has_item_cache = model_->has_item_cache();
    if (rc_.item_cache != "auto") {
      FT_USER_CHECK(rc_.item_cache == "on" || rc_.item_cache == "off", "--item-cache must be auto, on or off, got '",
                    rc_.item_cache, "'");
      FT_USER_CHECK(req.has_item_cache || rc_.item_cache == "on", "--item-cache off: model ", model_->describe(),
                    " has no item table to drop (the full cross-entropy head scores every item)");
      if (req.has_item_cache) req.item_cache = rc_.item_cache == "on";
    }
    // FT_KEEP_ACTIVATIONS=off: recompute as if memory were short (for measurements).
    const char* keep = std::getenv("FT_KEEP_ACTIVATIONS");
    FT_USER_CHECK(!keep || !*keep || std::strcmp(keep, "auto") == 0 || std::strcmp(keep, "off") == 0,
                  "FT_KEEP_ACTIVATIONS must be auto or off, got '", keep, "'");
    req.max_keep_level = keep && std::strcmp(keep, "off") == 0 ? 0 : model_->max_keep_level();
    // Recompute for speed at small micro-batches (plan/fit.h, SpeedModel): on GPUs, whose
    // rate falls with few rows a product; the CPU's hardly does.
    if (backend_->device() == DeviceKind::cuda)
      req.speed = {model_->rows_per_sample(), kGpuHalfRateRows, model_->recompute_cost()};
    fit_ = fit_on_every_rank([&] { return fit_batch(fn, base, req); });
    if (comm_->world_size() > 1) {
      // Ranks with different budgets may weigh recompute for speed differently, and the
      // agreement below would then pair one's recompute with the other's small micro-batch:
      // where they differ, every rank fits again by memory alone.
      const auto rc = static_cast<int64_t>(fit_->shape.recompute);
      const int64_t least = comm_->all_reduce_min(rc);  // collectives in one order on every rank
      const int64_t most = -comm_->all_reduce_min(-rc);
      // Every rank fits again in the same order, whether or not its own plan changes, so that
      // a refusal on one rank (a pinned --eval-batch-size beside a different training plan)
      // reaches every rank as one message with a value all of them take, instead of one rank
      // failing while the others wait in the next collective.
      auto refit_if = [&](bool needed) {
        fit_ = fit_on_every_rank([&] { return needed ? fit_batch(fn, base, req) : *fit_; });
      };
      const bool by_memory = least != most && req.speed.on();
      if (by_memory) req.speed = {};
      refit_if(by_memory);
      // Every rank fits for its own budget (the budget is per rank); they must run one plan.
      // First the most memory-saving choices any rank needed (sharding, recompute, the item
      // table dropped): a rank that chose otherwise fits again with them pinned, its
      // micro-batch as asked (auto or pinned), so that the smallest micro-batch, agreed next,
      // is one every rank takes under those choices. (The smallest of micro-batches fitted
      // under different choices paired one rank's recompute with another's small
      // no-recompute batch: 16 accumulation steps where 4 fitted on every rank.) Each choice
      // saves memory, so a rank that fitted without it fits with it. Then the keep level at
      // that batch: the lowest any rank can take (a rank's first came from its own batch).
      const int zero = static_cast<int>(-comm_->all_reduce_min(-fit_->shape.zero_stage));
      const auto recompute = static_cast<Recompute>(-comm_->all_reduce_min(-static_cast<int64_t>(fit_->shape.recompute)));
      const bool cache = comm_->all_reduce_min(fit_->shape.item_cache ? 1 : 0) == 1;
      auto pin = [&](int z, Recompute r, bool table) {
        if (req.has_item_cache) req.item_cache = table;
        req.zero_stage = z;
        req.recompute = r;
      };
      const bool choices_differ =
          zero != fit_->shape.zero_stage || recompute != fit_->shape.recompute || cache != fit_->shape.item_cache;
      if (choices_differ) pin(zero, recompute, cache);
      refit_if(choices_differ);
      const int64_t mb = comm_->all_reduce_min(fit_->shape.micro_batch);
      auto refit = [&](int64_t micro, bool needed) {  // with the agreed choices pinned
        if (needed) {
          pin(zero, recompute, cache);
          req.micro_batch = micro;
          req.grad_accum = 0;
        }
        refit_if(needed);
      };
      refit(mb, mb != fit_->shape.micro_batch);
      // A lower cap can take a rank below it (a level's plan is not always larger than the one
      // below), so until every rank has the same level; each round lowers the lowest, and
      // level 0 fits wherever the batch does.
      for (;;) {
        const auto level = static_cast<int>(comm_->all_reduce_min(fit_->shape.keep_level));
        if (-comm_->all_reduce_min(-fit_->shape.keep_level) == level) break;  // every rank: the same
        req.max_keep_level = level;
        refit(mb, true);
      }
      FT_CHECK(-comm_->all_reduce_min(-fit_->shape.micro_batch) == mb, "the ranks planned different micro-batches");
      agree_on_eval_batch(fn, req.budget);
    }
  } else {
    // Evaluation only: parameters plus the largest evaluation batch that fits.
    fit_ = fit_on_every_rank([&] {
      FitResult r;
      r.budget = req.budget;
      r.budget_source = req.budget_source;
      r.shape = base;
      int64_t cap = req.eval_batch > 0 ? req.eval_batch : std::max<int64_t>(1, rc_.global_batch_size);
      int64_t eb = largest_fitting(fn, base, cap, req.budget, true);
      if (eb == 0)
        throw FitRefused(detail::concat("nothing fits: evaluating this model needs ", format_bytes(fn(base).total_bytes),
                                        " but the budget is ", format_bytes(req.budget), " (", req.budget_source, ")"));
      if (req.eval_batch > 0 && eb != req.eval_batch)
        throw FitRefused([asked = req.eval_batch](int64_t fits) {
          return detail::concat("--eval-batch-size ", asked, " does not fit; the largest that fits is ", fits);
        }, eb, FitRefused::Take::least_eval_batch);
      r.shape.eval_batch = eb;
      r.plan = fn(r.shape);
      return r;
    });
    if (comm_->world_size() > 1) agree_on_eval_batch(fn, req.budget);
  }
  // What the process holds once the plan is made: the start's resident set and what planning
  // itself loaded (the backend builds its attention plans while the model's ops are sized).
  budget_.host_runtime_bytes = std::max(budget_.host_runtime_bytes, host_rss_bytes());
  host_plan_ = host_plan(model_->num_params(), sample_bytes, loss_floats, fit_->shape,
                         backend_->upload_staging_bytes(), backend_->first_step_host_allowance(),
                         hf_bytes);
  host_plan_.runtime_bytes = budget_.host_runtime_bytes;
  if (budget_.host_comm_estimate_bytes)
    host_plan_.items.push_back({"NCCL host side (estimated)", budget_.host_comm_estimate_bytes});
  // On the CPU the arena is host memory as well.
  const size_t arena_on_host = backend_->device() == DeviceKind::cpu ? fit_->plan.total_bytes : 0;
  FT_USER_CHECK(host_plan_.total() + arena_on_host <= budget_.host_bytes, "host memory needs ",
                format_bytes(host_plan_.total() + arena_on_host), " (", format_bytes(host_plan_.runtime_bytes),
                " held when planned, then its buffers and allowance",
                arena_on_host ? ", and the arena's " + format_bytes(arena_on_host) : std::string(), ") ",
                "but the host budget is ", format_bytes(budget_.host_bytes), " (", budget_.host_source, ")");
  return *fit_;
}

size_t Session::init_from_bytes() const {
  return rc_.init_from.empty() ? 0 : hf_import_host_bytes(rc_.init_from);
}

RunConfig Session::quiet_unless_rank0(const RunConfig& rc) {
  RunConfig mine = rc;
  if (comm_->rank() == 0) return mine;
  std::fflush(stdout);
  FT_CHECK(std::freopen("/dev/null", "w", stdout), "rank ", comm_->rank(), ": cannot silence stdout");
  mine.results_read_only = true;
  return mine;
}

FitResult Session::fit_on_every_rank(const std::function<FitResult()>& fit_here) {
  if (comm_->world_size() == 1) return fit_here();
  std::optional<FitResult> fitted;
  std::optional<FitRefused> refused;
  try {
    fitted = fit_here();
  } catch (const FitRefused& e) {
    refused = e;
  }
  if (ranks_with(*comm_, refused.has_value()) == 0) return *fitted;
  // The batch that fits every refused rank is the least any names, the memory the most; each
  // kind on its own (one rank may refuse the micro-batch, another the evaluation batch).
  auto named = [&](FitRefused::Take take, int64_t neutral) {
    return refused && refused->take() == take ? refused->value() : neutral;
  };
  const int64_t micro = comm_->all_reduce_min(named(FitRefused::Take::least_micro_batch, INT64_MAX));
  const int64_t eval = comm_->all_reduce_min(named(FitRefused::Take::least_eval_batch, INT64_MAX));
  const int64_t memory = -comm_->all_reduce_min(-named(FitRefused::Take::most_memory, 0));
  if (refused) {
    // The value may be another rank's (this rank alone fits more, or needs less): say so,
    // next to a budget that is this rank's own.
    auto every_rank = [&](const FitRefused& e) {
      return FitRefused(detail::concat(e.what(), " [rank ", comm_->rank(), " of ", comm_->world_size(),
                                       "; the value named is one every rank takes]"));
    };
    switch (refused->take()) {
      case FitRefused::Take::least_micro_batch: throw every_rank(refused->with_value(micro));
      case FitRefused::Take::least_eval_batch: throw every_rank(refused->with_value(eval));
      case FitRefused::Take::most_memory: throw every_rank(refused->with_value(memory));
      case FitRefused::Take::none: throw *refused;
    }
  }
  wait_to_be_ended_with_refused_ranks();  // this rank fits
}

void Session::wait_to_be_ended_with_refused_ranks() {
  // Ending this rank here could end the job before a refused rank has said why (the launcher
  // ends every rank at the first one's exit): it waits in a collective the refused ranks never
  // join, ended with them, or by --comm-timeout should they somehow not end.
  (void)comm_->all_reduce_min(0);
  FT_CHECK(false, "a refused rank went on");
}

// Before anything that depends on them: mpirun's MPMD form (-np 1 A : -np 1 B) or a --config
// file that differs between machines can give the ranks other flags, and a rank with another
// --lr or --global-seed trained another model without a word, one with another --model reduced
// gradients of another size. A rank whose flags differ from rank 0's says which; the others
// wait to be ended with it.
void Session::agree_on_settings() {
  agree_with_rank0(
      rc_.settings,
      [](const std::string& here, const std::string& rank0) {
        const std::string apart = first_setting_apart(here, rank0);
        return apart.empty() ? apart : "was given " + apart;
      },
      "every rank of a run takes the same flags (only --memory-limit, --host-memory-limit and --eval-batch-size "
      "may differ: each rank's budget, and the batch the ranks agree on)");
}

void Session::agree_with_rank0(const std::string& mine,
                               const std::function<std::string(const std::string&, const std::string&)>& apart,
                               const std::string& why) {
  if (comm_->world_size() <= 1) return;
  const std::string differs = apart(mine, broadcast_string(*comm_, mine));
  const int64_t apart_ranks = ranks_with(*comm_, !differs.empty());
  if (apart_ranks == 0) return;
  // Every rank but rank 0 apart from it: rank 0 is more likely the odd one (the message is a
  // refused rank's, which can only compare itself with rank 0).
  const bool rank0_odd = comm_->world_size() > 2 && apart_ranks == comm_->world_size() - 1;
  FT_USER_CHECK(differs.empty(), "this rank (", comm_->rank(), " of ", comm_->world_size(), ") ", differs, ": ", why,
                rank0_odd ? " (every rank but rank 0 differs from rank 0 here: rank 0 may be the one apart)" : "");
  wait_to_be_ended_with_refused_ranks();
}

// The ranks split every evaluation by its batches (train/task.h, EvalShard), so they must
// cut it into the same batches: the smallest evaluation batch any rank's memory took (a smaller
// one never plans more).
void Session::agree_on_eval_batch(const PlanFunction& fn, size_t budget) {
  const int64_t eb = comm_->all_reduce_min(fit_->shape.eval_batch);
  if (eb == fit_->shape.eval_batch) return;
  fit_->shape.eval_batch = eb;
  fit_->plan = fn(fit_->shape);
  FT_CHECK(fit_->plan.total_bytes <= budget, "a smaller evaluation batch planned more (", fit_->plan.total_bytes,
           " B) than the budget (", budget, " B)");
}

void Session::allocate() {
  fit();
  if (const StepTestHooks::AtRank left = StepTestHooks::from_env().memory_after_plan; left.on(comm_->rank()))
    testing::cpu_memory_limit_bytes = static_cast<size_t>(left.value);
  size_t free_before = 0, free_after = 0, total = 0;
  auto on_any_rank = [&](bool here) { return ranks_with(*comm_, here) > 0; };
  // Memory can be taken by another process between planning and allocating. Then re-plan
  // with what is free now (same global batch: a smaller micro-batch, more accumulation,
  // recompute if needed) instead of dying; give up only when the plan cannot shrink. With
  // several ranks, all re-plan together (fit() agrees on one plan), as soon as any ran out.
  for (int attempt = 0;; ++attempt) {
    backend_->mem_info(&free_before, &total);
    std::string why;  // this rank's allocation failure, "" if none
    try {
      runtime_ = std::make_unique<ModelRuntime>(*model_, *backend_, fit_->shape, comm_.get());
    } catch (const OutOfMemoryError& e) {
      why = e.what();
    }
    const bool failed_here = !why.empty();
    if (!on_any_rank(failed_here)) break;
    runtime_.reset();  // a rank that allocated gives its arena back before the re-plan
    if (!failed_here) backend_->mem_info(&free_before, &total);
    const size_t budget = std::min(budget_.arena_bytes(), free_memory_budget(free_before, total));
    // Give up after 3 re-plans, or where a rank that ran out cannot plan smaller: every rank alike.
    const bool stuck = failed_here && budget >= fit_->plan.total_bytes;
    if (attempt >= 3 || on_any_rank(stuck)) {
      if (failed_here) throw OutOfMemoryError(why);
      throw UserError(detail::concat("another rank ran out of memory allocating the plan (", format_bytes(fit_->plan.total_bytes),
                                     " a rank) and no smaller plan fits it (at most 3 re-plans): its message says what"));
    }
    if (failed_here) {  // a rank other than 0 says so on stderr: its stdout is silenced in training
      const std::string who = comm_->rank() != 0 ? detail::concat("rank ", comm_->rank(), ": ") : "";
      std::fprintf(who.empty() ? stdout : stderr, "%sre-plan    %s; free memory is now %s, re-planning for a budget of %s\n",
                   who.c_str(), why.c_str(), format_bytes(free_before).c_str(), format_bytes(budget).c_str());
    } else {
      std::printf("re-plan    another rank ran out of memory allocating the plan; every rank re-plans\n");
    }
    const size_t old_mb = static_cast<size_t>(fit_->shape.micro_batch);
    const int old_kept = model_->kept_blocks(fit_->shape.keep_level);
    budget_.device_bytes = budget + budget_.runtime_bytes;
    if (failed_here) budget_.source = "re-planned: free memory less the margin";
    fit_.reset();
    fit();  // throws "nothing fits" with the smallest budget that would
    std::printf("re-plan    micro-batch %zu -> %lld, accumulation %lld, recompute %s, kept blocks %d -> %d\n",
                old_mb, static_cast<long long>(fit_->shape.micro_batch), static_cast<long long>(fit_->grad_accum),
                recompute_name(fit_->shape.recompute), old_kept, model_->kept_blocks(fit_->shape.keep_level));
  }
  FT_CHECK(runtime_->plan().total_bytes == fit_->plan.total_bytes, "the runtime's plan (",
           runtime_->plan().total_bytes, " B) differs from the fitted plan (", fit_->plan.total_bytes, " B)");
  backend_->mem_info(&free_after, &total);
  measured_arena_bytes_ = backend_->device() == DeviceKind::cpu
                              ? runtime_->arena().size()
                              : (free_before > free_after ? free_before - free_after : 0);
}

Session::RankMemory Session::memory_over_ranks() {
  // Three runs of world-size values in one reduction.
  const auto world = static_cast<size_t>(comm_->world_size()), me = static_cast<size_t>(comm_->rank());
  std::vector<double> all(3 * world, 0.0);
  all[me] = static_cast<double>(arena().high_water_bytes());
  all[world + me] = static_cast<double>(host_plan_.total());
  all[2 * world + me] = static_cast<double>(host_peak_rss_bytes());
  comm_->all_reduce_sum(all);
  auto run_of = [&](size_t k) {
    return std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(k * world),
                               all.begin() + static_cast<std::ptrdiff_t>((k + 1) * world));
  };
  RankMemory m{run_of(0), run_of(1), run_of(2), 0};
  m.arena_peak = static_cast<size_t>(*std::max_element(m.arena_peaks.begin(), m.arena_peaks.end()));
  return m;
}

}  // namespace ft
