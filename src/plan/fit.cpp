#include "plan/fit.h"

#include <algorithm>
#include <cstdint>

#include "core/batch.h"
#include "core/error.h"

namespace ft {

namespace {

// a * b, or SIZE_MAX when it would overflow: an absurd batch gives an absurd (refused)
// host plan, never a wrapped-around small one.
size_t mul_sat(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

// a + b, or SIZE_MAX when it would overflow (the host plan's total, as mul_sat).
size_t add_sat(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

// The largest x in [lo, hi] with fits(x), given fits(lo), by bisection (plans grow
// monotonically with the micro-batch and the evaluation batch).
template <class Fits>
int64_t largest_in(int64_t lo, int64_t hi, Fits fits) {
  if (fits(hi)) return hi;
  while (hi - lo > 1) {  // invariant: fits(lo), !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

size_t HostPlan::total() const {
  size_t n = runtime_bytes, staging = 0;
  for (const HostItem& i : items) {
    if (i.one_at_a_time) staging = std::max(staging, i.bytes);
    else n = add_sat(n, i.bytes);
  }
  return add_sat(n, staging);
}

HostPlan host_plan(int64_t num_params, size_t sample_bytes, size_t loss_floats, const PlanShape& s,
                   size_t upload_ring_bytes, size_t first_step_bytes, size_t init_from_bytes) {
  HostPlan h;
  const size_t tb = s.training ? static_cast<size_t>(s.micro_batch) : 0;
  const size_t eb = static_cast<size_t>(s.eval_batch);
  // every field of a sample, for the current and the prefetched micro-batch
  if (s.training) h.items.push_back({"train batch staging (x2 prefetch)", mul_sat(2, mul_sat(tb, sample_bytes))});
  h.items.push_back({"eval batch staging", mul_sat(eb, sample_bytes)});
  h.items.push_back({"loss read-back", mul_sat(std::max(tb, eb), mul_sat(loss_floats, 4))});
  if (s.training) h.items.push_back({"step sums read-back", kStepScalarBytes});
  // The blocks the weights pass through at the start and at a load (train/runtime.cpp), a
  // checkpoint's sections on their way to the file (model_io.cpp), and a Hugging Face
  // folder's tensors (train/hf_interchange.cpp): freed when their phase ends, never alive
  // together.
  h.items.push_back({"weights blocks (start, load, checkpoint)", weights_block_bytes(num_params), true});
  if (init_from_bytes > 0) h.items.push_back({"Hugging Face tensors (--init-from)", init_from_bytes, true});
  if (upload_ring_bytes > 0) h.items.push_back({"upload ring (page-locked)", upload_ring_bytes});
  if (first_step_bytes > 0) h.items.push_back({"libraries at the first step (allowance)", first_step_bytes});
  return h;
}

size_t shared_host_budget(size_t available_bytes, size_t total_bytes, int local_ranks) {
  return default_budget(available_bytes, total_bytes) / static_cast<size_t>(std::max(1, local_ranks));
}

size_t default_budget(size_t free_bytes, size_t total_bytes) {
  size_t margin = std::max(kMinSafetyMargin, total_bytes / 50);
  return free_bytes > margin ? free_bytes - margin : 0;
}

int64_t max_plannable_batch(const PlanFunction& plan_fn, PlanShape shape, bool has_item_cache) {
  shape.micro_batch = 1;
  shape.eval_batch = 1;
  // With the item table and without (a recommender without it scores N (1 + K) rows a step:
  // with 500 negatives, buffers 500 times the table-on plan's, past the 4x margin below).
  size_t per_sample = 1;
  for (bool table : {true, false}) {
    if (!table && !has_item_cache) break;
    shape.item_cache = table;
    size_t bytes = 1;
    for (const BufferSpec& b : plan_fn(shape).buffers) bytes += b.bytes + kArenaAlignment;
    per_sample = std::max(per_sample, bytes);
  }
  return static_cast<int64_t>(kMaxPlannableBytes / per_sample);
}

int64_t largest_fitting(const PlanFunction& plan_fn, PlanShape shape, int64_t cap, size_t budget,
                        bool vary_eval) {
  auto fits = [&](int64_t b) {
    PlanShape s = shape;
    (vary_eval ? s.eval_batch : s.micro_batch) = b;
    return plan_fn(s).total_bytes <= budget;
  };
  if (cap < 1 || !fits(1)) return 0;
  return largest_in(1, cap, fits);
}

FitResult fit_batch(const PlanFunction& plan_fn, PlanShape base, const FitRequest& req) {
  const int W = std::max(1, base.world_size);
  FT_USER_CHECK(req.global_batch >= 1, "--global-batch-size must be >= 1, got ", req.global_batch);
  FT_USER_CHECK(req.global_batch >= W, "--global-batch-size ", req.global_batch, " is smaller than the ", W,
                " ranks: each needs at least one sample a step");
  // The largest share, rank 0's (a batch that does not divide leaves the last ranks one fewer):
  // the plan is that rank's, and every rank runs as many micro-steps (micro_batch_sizes).
  const auto per_rank = static_cast<int64_t>(rank_share(static_cast<uint64_t>(req.global_batch), W, 0));
  const bool ragged_ranks = req.global_batch % W != 0;
  FitResult r;
  r.per_rank_batch = per_rank;
  r.budget = req.budget;
  r.budget_source = req.budget_source;
  base.eval_batch = 1;  // training is fitted with the smallest evaluation, so eval always fits

  if (req.micro_batch > 0 && req.grad_accum > 0)
    // (compared by division: the product of two large flags must not overflow)
    FT_USER_CHECK(per_rank % req.grad_accum == 0 && req.micro_batch == per_rank / req.grad_accum,
                  "--micro-batch-size ", req.micro_batch, " x --grad-accum-steps ", req.grad_accum,
                  " is not the per-rank batch ", per_rank, " (--global-batch-size ", req.global_batch, " over ", W,
                  " ranks", ragged_ranks ? ", the largest share" : "", ")");
  int64_t forced_mb = req.micro_batch;
  if (forced_mb == 0 && req.grad_accum > 0) {
    FT_USER_CHECK(per_rank % req.grad_accum == 0, "--grad-accum-steps ", req.grad_accum,
                  " does not divide the per-rank batch ", per_rank, ragged_ranks ? " (the largest share)" : "");
    forced_mb = per_rank / req.grad_accum;
  }
  FT_USER_CHECK(forced_mb <= per_rank, "--micro-batch-size ", forced_mb,
                " is larger than the per-rank batch ", per_rank, " (--global-batch-size ",
                req.global_batch, " over ", W, " ranks)");

  // Candidate settings in order of preference, each pinned one (nullopt / -1: auto) alone.
  auto rungs = [W](std::optional<Recompute> recompute, int zero_stage) {
    std::vector<Recompute> rcs = recompute ? std::vector<Recompute>{*recompute}
                                           : std::vector<Recompute>{Recompute::none, Recompute::block};
    std::vector<int> zs;
    if (zero_stage >= 0) zs = {zero_stage};
    // Several ranks: ZeRO-1 first. It is not only smaller: gradients summed onto their shard's
    // owner (a reduce, half an all-reduce's traffic) beside the backward plus one all-gather
    // of the parameters after the update measured faster than the overlapped all-reduce
    // (4x H100, docs/PERFORMANCE.md).
    else if (W > 1) zs = {1, 0};
    else zs = {0};
    // Sharding before recompute: ZeRO-1 costs nothing (above), recompute a second forward
    // pass of every block.
    std::vector<std::pair<Recompute, int>> out;
    for (Recompute rc : rcs)
      for (int z : zs) out.emplace_back(rc, z);
    return out;
  };
  const std::vector<std::pair<Recompute, int>> ladder = rungs(req.recompute, req.zero_stage);

  auto shape_for = [&](Recompute rc, int z, int64_t mb) {
    PlanShape s = base;
    s.recompute = rc;
    s.zero_stage = z;
    s.micro_batch = mb;
    return s;
  };

  // The item table: kept unless dropping it lets a larger micro-batch (fewer accumulation
  // steps) fit on this rung.
  auto steps = [&](int64_t mb) { return mb > 0 ? (per_rank + mb - 1) / mb : INT64_MAX; };
  auto choose_cache = [&](PlanShape& s) {
    if (!req.has_item_cache) return;
    if (req.item_cache) {
      s.item_cache = *req.item_cache;
      return;
    }
    PlanShape off = s;
    off.item_cache = false;
    s.item_cache = true;
    const int64_t with = largest_fitting(plan_fn, s, per_rank, req.budget, false);
    const int64_t without = largest_fitting(plan_fn, off, per_rank, req.budget, false);
    const int64_t want = forced_mb > 0 ? forced_mb : per_rank;
    if (with >= want) return;
    // (pinned and fitting neither way: the larger, which the refusal then names)
    if (forced_mb > 0 ? without >= want || without > with : steps(without) < steps(with)) s.item_cache = false;
  };

  // The first recompute rung that fits, when its larger micro-batch is predicted at least
  // kRecomputeMinGain faster per sample than none's `fewest_none` steps (SpeedModel): the
  // average micro-batch of each is what its steps spread the per-rank batch over.
  auto prefer_recompute_if_faster = [&](int64_t fewest_none) {
    const double batch = static_cast<double>(per_rank);
    for (auto [rc, z] : ladder) {
      if (rc == Recompute::none) continue;
      PlanShape s = shape_for(rc, z, 1);
      choose_cache(s);
      const int64_t maxfit = largest_fitting(plan_fn, s, per_rank, req.budget, false);
      if (maxfit == 0) continue;
      const int64_t fewest = steps(maxfit);
      const double ratio = req.speed.time_per_sample(true, batch / fewest) /
                           req.speed.time_per_sample(false, batch / fewest_none);
      if (ratio <= 1 - kRecomputeMinGain) {
        r.micro_batch_without_recompute = r.max_fitting_micro_batch;
        r.predicted_time_ratio = ratio;
        s.micro_batch = (per_rank + fewest - 1) / fewest;
        r.shape = s;
        r.max_fitting_micro_batch = maxfit;
      }
      return;  // the first recompute rung that fits is the one to weigh (ZeRO-1 first)
    }
  };

  bool chosen = false;
  for (auto [rc, z] : ladder) {
    PlanShape s = shape_for(rc, z, 1);
    choose_cache(s);
    base.item_cache = s.item_cache;  // shape_for() builds on base
    int64_t maxfit = largest_fitting(plan_fn, s, per_rank, req.budget, false);
    if (maxfit == 0) continue;
    if (forced_mb > 0 && forced_mb > maxfit) {
      // With an explicit micro-batch, try the next rung (recompute, sharding) before refusing.
      r.max_fitting_micro_batch = std::max(r.max_fitting_micro_batch, maxfit);
      continue;
    }
    // Auto: the fewest accumulation steps the largest fitting micro-batch allows, with the
    // per-rank batch spread evenly over them (ceil(per-rank / steps)): the same steps as the
    // largest, without a small remainder as the last micro-batch (GPT-2 XL on one H200: 45 + 19
    // became 32 + 32) and with the memory of the largest left for keep levels and evaluation.
    const int64_t fewest = steps(maxfit);
    r.shape = shape_for(rc, z, forced_mb > 0 ? forced_mb : (per_rank + fewest - 1) / fewest);
    r.max_fitting_micro_batch = maxfit;
    chosen = true;
    if (forced_mb == 0 && !req.recompute && rc == Recompute::none && fewest > 1 && req.speed.on())
      prefer_recompute_if_faster(fewest);
    break;
  }
  if (!chosen) {
    // What the smallest rung needs at micro-batch mb. Not the ladder's last rung: with several
    // ranks ZeRO-1 comes first, so the last (recompute, ZeRO-0) is larger than the one before.
    struct Need {
      size_t bytes = SIZE_MAX;
      Recompute rc = Recompute::block;
      int zero = 0;
      bool table = true;
    };
    // With --item-cache auto, the table dropped too (it is what a small budget drops first).
    const bool table_free = req.has_item_cache && !req.item_cache;
    auto smallest = [&](int64_t mb, const std::vector<std::pair<Recompute, int>>& candidates) {
      Need n;
      for (auto [rc, z] : candidates)
        for (bool table : {true, false}) {
          if (!table && !table_free) continue;
          PlanShape sh = shape_for(rc, z, mb);
          if (table_free) sh.item_cache = table;
          if (const size_t b = plan_fn(sh).total_bytes; b < n.bytes) n = {b, rc, z, sh.item_cache};
        }
      return n;
    };
    auto table_note = [&](const Need& n) { return req.has_item_cache && !n.table ? ", item table off" : ""; };
    if (forced_mb > 0 && r.max_fitting_micro_batch > 0) {
      const std::string needs = detail::concat(" does not fit: it needs ", format_bytes(smallest(forced_mb, ladder).bytes),
                                               " but the budget is ", format_bytes(req.budget), " (",
                                               req.budget_source, "); the largest micro-batch that fits is ");
      if (req.micro_batch > 0)
        throw FitRefused([needs, forced_mb](int64_t fits) {
          return detail::concat("--micro-batch-size ", forced_mb, needs, fits, " (or leave --micro-batch-size at auto)");
        }, r.max_fitting_micro_batch, FitRefused::Take::least_micro_batch);
      // The micro-batch came from --grad-accum-steps: name that flag, and the fewest steps that
      // divide the per-rank batch into micro-batches that fit (per_rank itself always does).
      throw FitRefused([needs, forced_mb, per_rank, accum = req.grad_accum](int64_t fits) {
        int64_t steps = (per_rank + fits - 1) / fits;
        while (per_rank % steps != 0) ++steps;
        return detail::concat("--grad-accum-steps ", accum, " gives micro-batches of ", forced_mb, " (the per-rank batch ",
                              per_rank, " in ", accum, " steps), which", needs, fits, ": pass --grad-accum-steps ",
                              steps, " or leave it at auto");
      }, r.max_fitting_micro_batch, FitRefused::Take::least_micro_batch);
    }
    // Training is fitted beside an evaluation batch of 1; a pinned --eval-batch-size must fit
    // too, so a budget named is the one for both (naming less was refused again, for it).
    auto beside_eval = [&](const Need& n) {
      if (req.eval_batch <= 1) return n.bytes;
      PlanShape sh = shape_for(n.rc, n.zero, 1);
      if (table_free) sh.item_cache = n.table;
      sh.eval_batch = req.eval_batch;
      return std::max(n.bytes, plan_fn(sh).total_bytes);
    };
    const Need one = smallest(1, ladder);
    // A pinned --recompute or --zero-stage may be all that stands in the way: say so.
    std::string unpinned;
    if (req.recompute || req.zero_stage >= 0) {
      const Need n = smallest(1, rungs(std::nullopt, -1));
      if (const size_t need = beside_eval(n); need <= req.budget)
        unpinned = detail::concat(" With --recompute and --zero-stage at auto it fits (micro-batch 1, recompute ",
                                  recompute_name(n.rc), ", ZeRO stage ", n.zero, table_note(n), ": ",
                                  format_bytes(need), ").");
    }
    const size_t with_eval = beside_eval(one);
    // The bytes beside the rounded size: a budget typed back from it must not fall short.
    const bool eval_needs_more = with_eval > one.bytes;
    const std::string eval_note =
        eval_needs_more ? detail::concat(" with --eval-batch-size ", req.eval_batch) : std::string();
    const size_t limit_that_fits = req.limit_for_arena ? req.limit_for_arena(with_eval) : 0;
    // The limit named in whole MiB, rounded up (the spare for what the next process measures is
    // in FitRequest::limit_for_arena's value already).
    const auto limit_mib = static_cast<int64_t>((limit_that_fits + (1 << 20) - 1) >> 20);
    const std::string head = detail::concat(
        "nothing fits: the smallest configuration (micro-batch 1, recompute ", recompute_name(one.rc),
        ", ZeRO stage ", one.zero, table_note(one), ") needs ", format_bytes(one.bytes), " (", one.bytes,
        " bytes) but the budget is ", format_bytes(req.budget), " (", req.budget_source,
        "). A budget of at least ", format_bytes(with_eval),
        eval_needs_more ? detail::concat(" (", with_eval, " bytes)") : std::string(), " would fit", eval_note);
    const std::string tail = "; or use a smaller model or --seq-len." + unpinned;
    if (limit_that_fits)
      throw FitRefused([head, tail, flag = req.budget_flag](int64_t mib) {
        return detail::concat(head, " (", flag, " ", mib, "MiB fits, with the host buffers and runtime beside the arena)",
                              tail);
      }, limit_mib, FitRefused::Take::most_memory);
    throw FitRefused(detail::concat(head,
                                    req.limit_for_arena ? detail::concat(", more than the memory available here (no ",
                                                                         req.budget_flag, " gives the arena that much)")
                                                        : std::string(),
                                    tail));
  }

  // Memory left under the budget buys speed: the highest keep level that still fits, decided
  // after the batch so that it never costs a larger batch. Every level is tried from the
  // highest down: a higher level keeps more bytes, but its plan is not always larger (CDEIT's
  // kept blocks need no transient of their own for d(fch)), so a search by halves could stop
  // short. A plan is about 1.4 ms on the CPU backend (CDEIT: 255 levels).
  if (req.max_keep_level > 0 && r.shape.recompute == Recompute::none) {
    PlanShape s = r.shape;
    s.eval_batch = std::max<int64_t>(1, req.eval_batch);  // an explicit one must still fit beside them
    auto fits = [&](int64_t level) {
      s.keep_level = static_cast<int>(level);
      return plan_fn(s).total_bytes <= req.budget;
    };
    int level = req.max_keep_level;
    while (level > 0 && !fits(level)) --level;
    r.shape.keep_level = level;  // 0: the chosen shape
  }

  const int64_t mb = r.shape.micro_batch;
  r.grad_accum = (per_rank + mb - 1) / mb;
  r.last_micro_batch = per_rank - (r.grad_accum - 1) * mb;
  // Evaluation: its own micro-batch inside the same arena and budget.
  const int64_t cap = req.eval_cap > 0 ? req.eval_cap : per_rank;
  if (req.eval_batch > 0) {
    PlanShape s = r.shape;
    s.eval_batch = req.eval_batch;
    size_t need = plan_fn(s).total_bytes;
    if (need > req.budget) {
      const std::string head = detail::concat("--eval-batch-size ", req.eval_batch, " does not fit beside training (needs ",
                                              format_bytes(need), ", budget ", format_bytes(req.budget),
                                              "); the largest that fits is ");
      throw FitRefused([head](int64_t fits) { return head + std::to_string(fits); },
                       largest_fitting(plan_fn, r.shape, req.eval_batch, req.budget, true), FitRefused::Take::least_eval_batch);
    }
    r.shape.eval_batch = req.eval_batch;
  } else {
    r.shape.eval_batch = std::max<int64_t>(1, largest_fitting(plan_fn, r.shape, cap, req.budget, true));
  }
  r.plan = plan_fn(r.shape);
  FT_CHECK(r.plan.total_bytes <= req.budget, "fitted plan exceeds the budget");
  return r;
}

std::vector<int64_t> micro_batch_sizes(const FitResult& fit, int64_t share) {
  FT_CHECK(share == fit.per_rank_batch || share == fit.per_rank_batch - 1, "a rank's share of ", share,
           " samples next to the largest, ", fit.per_rank_batch);
  std::vector<int64_t> sizes(static_cast<size_t>(fit.grad_accum), fit.shape.micro_batch);
  sizes.back() = fit.last_micro_batch;
  if (share < fit.per_rank_batch) {
    // One sample fewer: from the last micro-batch, or from the first when the last has one.
    // In micro-batches of 1 the first is then empty: that rank skips it. Only the last
    // micro-step's backward takes part in the reductions, and it is never the emptied one
    // (a smaller share has a sample, so the largest has two: two micro-steps at least).
    int64_t& from = sizes.back() > 1 ? sizes.back() : sizes.front();
    FT_CHECK(from > 1 || (fit.grad_accum > 1 && &from == &sizes.front()), "a share of ", share, " samples in ",
             fit.grad_accum, " micro-steps");
    --from;
  }
  return sizes;
}

}  // namespace ft
