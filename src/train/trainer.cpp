// `fittrain train`: plan, allocate, then loop over optimizer steps. Each step: zero grads,
// forward+backward over the micro-batches (gradients accumulate), clip by global norm,
// AdamW. Around it: logging, metrics, periodic evaluation and checkpoints, resume, and a
// clean stop on SIGINT/SIGTERM (checkpoint first, then exit 130).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <algorithm>

#include "backend/device_trace.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "data/mapped_file.h"
#include "data/sampler.h"
#include "dist/launch.h"
#include "dist/mpi_communicator.h"
#include "optim/ema.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "train/batch_loader.h"
#include "train/grad_reducer.h"
#include "train/step_trace.h"
#include "train/hf_interchange.h"
#include "train/checkpoint_dir.h"
#include "train/model_io.h"
#include "train/results_dir.h"
#include "train/progress.h"
#include "train/rank_agreement.h"
#include "train/run_log.h"
#include "train/run_checks.h"
#include "train/session.h"
#include "train/step_guard.h"
#include "train/stop_signal.h"
#include "train/task.h"
#include "train/trainer.h"

namespace ft {

namespace {

// A device allocation failed mid-run (a library, the driver, another process), on this rank
// or, inside a step, on another: the run saved its last completed step; run_train re-plans for
// the memory free now and continues (several ranks: all of them, together).
struct ReplanNeeded : std::runtime_error {
  ReplanNeeded(const std::string& what, size_t plan_bytes, bool in_eval = false)
      : std::runtime_error(what), plan_bytes(plan_bytes), in_eval(in_eval) {}
  size_t plan_bytes;  // the arena that no longer fits: the next plan must be smaller
  bool in_eval;       // an evaluation ran out (the re-planned run evaluates that step again)
};

// `lock` is run_train's: the results folder's lock, held across re-plans (empty at first).
int train_once(const RunConfig& rc, std::chrono::steady_clock::time_point started, std::optional<ResultsDirLock>& lock) {
  check_run_config(rc);  // every flag in range (train/run_checks.h), before anything is opened
  // Before anything in --results-dir is touched: checked, locked for this process, and
  // refused when this run would mix with another's checkpoints (train/results_dir.h).
  // With several ranks (data parallelism over MPI) rank 0 alone owns the folder: the lock,
  // the resume decision (sent to the others, which read that checkpoint), the built-in
  // corpus, logs, metrics and checkpoints. Other ranks write nothing there and print nothing.
  std::optional<ResultsDir> results;
  if (rank_placement_from_env().world <= 1) results.emplace(rc, lock);

  Session s(rc, true);
  Communicator& comm = s.comm();
  const bool rank0 = comm.rank() == 0;
  const RunConfig rc_rank = s.quiet_unless_rank0(rc);
  if (rank0 && !results) results.emplace(rc, lock);
  std::unique_ptr<Task> task;
  if (rank0) task = make_task(rc, s.model(), true);
  // The other ranks wait here for rank 0's decision (and its built-in corpus): as long as it
  // takes (verifying a folder's checkpoints reads all their bytes), not --comm-timeout.
  if (comm.world_size() > 1) comm.barrier_without_timeout();
  if (comm.world_size() > 1) agree_on_results_dir(s, rc.results_dir);
  const std::string resume_from = broadcast_string(comm, rank0 ? results->resume_from() : std::string());
  if (!rank0) task = make_task(rc_rank, s.model(), true);
  const SampleSource& train = task->train_data();
  const SampleSource* val = task->val_data();
  if (comm.world_size() > 1) s.agree_with_rank0(data_identity_of(*task, rc, true), data_apart, same_data_reason(true));
  check_loss_units(*task, train, 0, "--data-path", true);
  if (val)
    check_loss_units(*task, *val, eval_samples(rc),
                     rc.val_data_path.empty() ? "--data-path's validation files" : "--val-data-path", false);

  const FitResult& fit = s.fit();
  if (comm.world_size() > 1) print_ranks(s);
  std::printf("%s", s.plan_table().c_str());
  // Each rank takes its consecutive run of every global batch (its share: core/batch.h's
  // rank_share): disjoint, and together exactly the global batch.
  BatchSampler sampler(train.num_samples(), static_cast<uint64_t>(rc.global_batch_size), comm.rank(),
                       comm.world_size(), rc.global_seed, true, "--data-path");
  // --epochs E: every sample of E epochs, ceil(E N / G) steps (data/sampler.h: a batch can
  // straddle two epochs' orders, so none is dropped).
  const uint64_t epoch_steps = rc.max_steps > 0 ? 0 : sampler.steps_for_epochs(static_cast<uint64_t>(rc.epochs));
  FT_USER_CHECK(epoch_steps <= INT64_MAX, "--epochs ", rc.epochs, " is too many: the run's step count would overflow");
  int64_t total_steps = rc.max_steps > 0 ? rc.max_steps : static_cast<int64_t>(epoch_steps);
  std::printf("data       %s (task %s): %llu train samples, %.2f steps per epoch; %s\n",
              task->describe_data().c_str(), task->name().c_str(), static_cast<unsigned long long>(train.num_samples()),
              sampler.steps_per_epoch(),
              val ? (std::to_string(val->num_samples()) + " validation samples").c_str() : "no validation data");

  s.allocate();
  ModelRuntime& model = s.runtime();
  {
    const double planned = static_cast<double>(fit.plan.total_bytes);
    const double measured = static_cast<double>(s.measured_arena_bytes());
    std::printf("allocated  arena %s measured%s, %s planned (%zu vs %zu bytes, %+.3f%%); process planned %s\n",
                format_bytes(s.measured_arena_bytes()).c_str(),
                s.device() == DeviceKind::cpu ? " (= allocation size on the CPU)" : " by cudaMemGetInfo before/after",
                format_bytes(fit.plan.total_bytes).c_str(), fit.plan.total_bytes, s.measured_arena_bytes(),
                planned > 0 ? 100.0 * (measured - planned) / planned : 0.0,
                format_bytes(s.planned_process_bytes()).c_str());
  }

  StepGuard guard(rc.max_bad_steps, StepTestHooks::from_env());  // non-finite steps (train/step_guard.h)
  TrainState st;
  const std::string ckdir = checkpoint_dir(rc.results_dir);
  if (rank0)
    for (auto& p : clean_stale_tmp(ckdir)) std::printf("removed stale %s\n", p.c_str());
  if (!resume_from.empty()) {
    st = load_checkpoint(s, resume_from, true);
    check_resumed_state(st, rc, resume_from, task->tokenizer(), train.num_samples());  // seed, tokenizer; said
    sampler.set_cursor(st.cursor);
    // --epochs ends where E epochs' samples do, counted from the cursor: the steps done may
    // have had another global batch.
    if (rc.max_steps == 0) total_steps = st.step + static_cast<int64_t>(sampler.steps_for_epochs(rc.epochs));
    std::printf("resumed    from %s at step %lld\n", resume_from.c_str(), static_cast<long long>(st.step));
    // --resume auto found this run's checkpoint: it continues the run that --init-from
    // started (re-running a fine-tuning command after a stop), so the folder's weights are
    // not loaded again.
    if (!rc.init_from.empty())
      std::printf("init-from  %s not loaded: the run continues from its checkpoint\n", rc.init_from.c_str());
  } else {
    if (!rc.init_from.empty()) {
      load_hf_weights(s, rc.init_from);  // optimizer state starts fresh
      std::printf("init-from  %s/%s: weights of %s (optimizer state fresh)\n", rc.init_from.c_str(), kHfWeightsFile,
                  s.model().describe().c_str());
    } else {
      const auto drawn = std::chrono::steady_clock::now();
      model.init_params(rc.global_seed);  // drawn and uploaded a block at a time
      std::printf("init       weights drawn from seed %llu and uploaded in %.1f s\n",
                  static_cast<unsigned long long>(rc.global_seed),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - drawn).count());
    }
    if (model.has_ema()) model.ema_update(0.f);  // the EMA starts as the weights
    if (rc.resume == "auto") std::printf("resume     no checkpoint in %s; starting fresh\n", ckdir.c_str());
  }
  st.tokenizer = task->tokenizer();  // into every checkpoint, for `sample`
  st.data_path = absolute_data_path(rc.data_path);  // and the data, for `test`
  st.train_samples = train.num_samples();
  const EmaSchedule ema = ema_schedule(rc);
  if (model.has_ema()) {
    st.ema_settings = {{"decay", ema.decay}, {"every", ema.every}, {"warmup", ema.warmup}, {"power", ema.power}};
    std::printf("ema        of the weights: decay up to %g every %lld steps, copies until step %lld, ramp power %g; "
                "evaluation uses it, checkpoints keep it (section ema)%s\n",
                ema.decay, static_cast<long long>(ema.every), static_cast<long long>(ema.warmup + 1), ema.power,
                !resume_from.empty() && !st.ema_loaded ? "; the checkpoint had none: started from its weights" : "");
  }
  if (results) results->start(st);  // this run's id into st, so into run.json and every checkpoint
  std::printf("%s", task->data_summary().c_str());

  // Rank 0 alone writes the metrics file and the TensorBoard events.
  RunLog metrics(rank0 ? rc.metrics_file : std::string(), rank0 ? rc.tensorboard : std::string(), started);
  // The live line and timestamped log lines (rank 0: the others print nothing).
  std::optional<Progress> progress_store;
  if (rank0) progress_store.emplace(st.step, total_steps);
  Progress* progress = rank0 ? &*progress_store : nullptr;
  auto say = [&](const std::string& text) {
    if (progress) progress->line(text);
    else std::printf("%s\n", text.c_str());
  };
  const int64_t mb = fit.shape.micro_batch, G = rc.global_batch_size;
  // fp16 keeps small gradients representable by scaling the loss; bf16 and fp32 need not.
  const bool fp16 = s.precision() == Precision::fp16;
  DynamicLossScaler scaler;
  if (fp16 && st.loss_scale > 0) scaler.restore(st.loss_scale, st.scale_clean_steps, st.scale_skipped_steps);
  // An fp16 checkpoint resumed in another precision: its overflow skips stay out of AdamW's count.
  if (!fp16) st.skipped_updates += std::exchange(st.scale_skipped_steps, 0);
  BatchLoader loader(train, mb, rc.num_workers > 0, &s.backend());  // its buffers: the device's upload sources
  // Several ranks: gradients are reduced while the last micro-batch's backward runs.
  std::optional<GradReducer> reducer;
  if (comm.world_size() > 1)
    reducer.emplace(s.backend(), comm, model.grads(), model.sharded() ? &model.optimizer().shard() : nullptr,
                    GradReducer::default_bucket_bytes(), GradReducer::kMinFlushBytes, model.comm_stream());
  StepTrace trace(s.backend(), comm.rank());  // FT_TRACE: a device trace of a few steps
  // This rank's samples of the step and the epoch each is visited in (a batch can straddle two).
  // A global batch that does not divide by the ranks leaves the last ones one sample fewer, in
  // as many micro-steps as the others (plan/fit.h: micro_batch_sizes); in micro-batches of 1
  // their first is empty and skipped (k0: the first micro-step this rank runs).
  const std::vector<int64_t> micro_sizes = micro_batch_sizes(fit, static_cast<int64_t>(sampler.local_batch()));
  std::vector<int64_t> micro_starts(micro_sizes.size(), 0);
  for (size_t k = 1; k < micro_sizes.size(); ++k) micro_starts[k] = micro_starts[k - 1] + micro_sizes[k - 1];
  const int64_t k0 = micro_sizes.front() == 0 ? 1 : 0;
  std::vector<uint64_t> indices(sampler.local_batch()), epochs(indices.size());
  std::vector<uint64_t> next_indices(indices.size()), next_epochs(indices.size());
  double next_units = 0;  // the next step's loss units over all ranks, when already known
  struct {                // the next step's first micro-batch, requested from the loader early
    bool pending = false;
    std::vector<uint64_t> indices, epochs;
  } prefetch;

  auto t_last = std::chrono::steady_clock::now();
  uint64_t tokens_since_log = 0;
  uint64_t samples_since_log = 0;  // sequences (users, images): throughput in samples too
  double run_tokens = 0;     // loss units (tokens) trained by this process, for the live line
  size_t shown_peak = 0;     // the arena peak last printed
  bool in_eval = false;  // an allocation failure came from an evaluation (the message says so)
  auto run_eval = [&]() {
    if (!val) return;
    in_eval = true;  // and FT_TEST_EVAL_OOM_AT: this rank's first loss batch fails (once)
    testing::fail_next_eval_batch = rc.replan_below_bytes == 0 && guard.hooks().eval_oom.at(st.step, comm.rank());
    auto t0 = std::chrono::steady_clock::now();
    ProgressActivity busy(progress, "evaluating at step " + std::to_string(st.step));
    // On the EMA weights when the run keeps them (swapped in and back: no memory outside the
    // plan, and the training weights come back bit for bit; ModelRuntime::swap_in_ema).
    // An error inside (out of memory) still puts the training weights back before the
    // checkpoint the error path writes.
    if (model.has_ema()) model.swap_in_ema();
    std::vector<Metric> ms;
    try {
      st.val_loss = evaluate(model, *task, *val, fit.shape.eval_batch, eval_samples(rc));
      st.val_loss_step = st.step;
      ms = task->metrics(st.val_loss);
      for (Metric& m : task->model_metrics(model, *val)) ms.push_back(std::move(m));
    } catch (...) {
      if (model.ema_swapped_in()) model.swap_out_ema();
      throw;
    }
    if (model.has_ema()) model.swap_out_ema();
    nlohmann::json row = {{"step", st.step}, {"val_loss", st.val_loss}};
    std::string extra;
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const Metric& m : ms) {
      row["val_" + m.name] = m.value;
      char buf[96];
      std::snprintf(buf, sizeof buf, " | %s %.3f", m.name.c_str(), m.value);
      extra += buf;
    }
    char head[96];
    std::snprintf(head, sizeof head, "eval       step %lld | val loss %.4f", static_cast<long long>(st.step), st.val_loss);
    char tail[32];
    std::snprintf(tail, sizeof tail, " | %.1f s", sec);
    say(head + extra + tail);
    metrics.write(row, RunLog::Row::eval);
    t_last = std::chrono::steady_clock::now();  // evaluation time is not training throughput
    testing::fail_next_eval_batch = false;
    in_eval = false;
  };

  // A rank ran out of memory inside the step (its vote in the step's sums, or the first step's
  // agreement): no rank ran the update; all save the last step and re-plan (run_train) together.
  auto replan_together = [&](int64_t ranks_out, const std::string& why) {
    say(detail::concat("re-plan    out of memory during step ", st.step + 1, " on ", ranks_out,
                       " of ", comm.world_size(), " ranks: every rank saves step ", st.step, " and re-plans"));
    save_and_prune(s, rc, guard.state_to_save(st, ckdir, !resume_from.empty()), progress);
    throw ReplanNeeded(why.empty() ? "another rank ran out of device memory" : why, fit.plan.total_bytes);
  };

  try {  // an allocation failure mid-run: save, then re-plan (run_train)
    // The evaluation that ran out of memory, again on the re-planned run, and its step's
    // checkpoint again with its loss (the last one's stays at the end: it evaluates anyway).
    if (rc.evaluate_first && st.step < total_steps) {
      run_eval();
      save_and_prune(s, rc, &st, progress);
    }
    if (testing::start_done) testing::start_done();
    if (comm.world_size() == 1 && stop_signal() != 0) {  // several ranks agree in step 1's sums
      say(detail::concat("signal ", stop_signal(), " during the start: stopping before step ", st.step + 1));
      return kExitStopped;
    }
    while (st.step < total_steps) {
      if (testing::before_train_step) testing::before_train_step(st.step + 1);
      if (guard.hooks().fail.at(st.step + 1, comm.rank())) throw UserError("a failure injected by FT_TEST_FAIL_AT (test hook)");
      if (guard.hooks().device_fault.at(st.step + 1, comm.rank())) s.backend().fault_for_test();
      if (guard.hooks().hang.at(st.step + 1, comm.rank()))
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // FT_TEST_HANG_AT: never answers again
      trace.begin_step(st.step + 1);
      // --epochs: the schedule runs over the epochs' samples, so a run resumed with another
      // global batch goes on along the same curve (positions counted in this run's batches).
      const double at = rc.max_steps > 0 ? static_cast<double>(st.step)
                                         : static_cast<double>(sampler.samples_done()) / static_cast<double>(G);
      const double lr = learning_rate(at, static_cast<double>(rc.max_steps > 0 ? total_steps : epoch_steps),
                                      rc.warmup_steps, rc.lr, rc.min_lr_ratio);
      sampler.next_batch(indices, epochs);
      // The loss is the mean over the loss units of the whole global batch, all ranks: each
      // unit's gradient weight is 1 / that count, so a smaller last micro-batch is exact.
      // Several ranks: the count was summed during the previous step (below), so a step
      // waits for the others once, not twice.
      double units[1] = {next_units};
      if (next_units <= 0) {
        units[0] = task->loss_units(train, indices);
        comm.all_reduce_sum(units);
      }
      next_units = 0;
      // No unit (chat rows all cut inside their prompt): the update is skipped (StepGuard::judge).
      // Its weight stays nonzero, so its masked targets give zero gradients (0 asks for none).
      const bool no_units = units[0] <= 0;
      const float dloss = no_units ? 1.0f : 1.0f / static_cast<float>(units[0]);
      model.zero_grads();
      double loss_sum = 0;
      auto part = [&](const std::vector<uint64_t>& v, int64_t k) {
        const auto i = static_cast<size_t>(k);
        return std::span<const uint64_t>(v.data() + micro_starts[i], static_cast<size_t>(micro_sizes[i]));
      };
      auto slice = [&](int64_t k) { return part(indices, k); };
      // The first micro-batch was usually requested during the previous step's last backward
      // (below): taken if it is this step's, dropped otherwise (a rank's sampler was reset).
      const bool have_first = prefetch.pending && std::ranges::equal(prefetch.indices, slice(k0)) &&
                              std::ranges::equal(prefetch.epochs, part(epochs, k0));
      // The next step's samples (a copy of the sampler looks one step ahead: the real one, and
      // so the checkpointed cursor, moves only when that step starts).
      bool peeked = false;
      auto peek_next = [&] {
        if (peeked || st.step + 1 >= total_steps) return;
        BatchSampler peek = sampler;
        peek.next_batch(next_indices, next_epochs);
        peeked = true;
      };
      // Out of memory inside the step on one of several ranks: it still queues every collective
      // the others queue (GradReducer::drain) and sends a NaN loss with its vote, so that every
      // rank skips the update, learns of it from the step's sums and re-plans (below).
      bool oom_here = false;
      std::string oom_what;
      const bool inject_oom = rc.replan_below_bytes == 0 && guard.hooks().oom.at(st.step + 1, comm.rank());
      try {
        if (prefetch.pending && !have_first) (void)loader.get();
        prefetch.pending = false;
        if (!have_first) loader.request(slice(k0), part(epochs, k0));
        if (inject_oom && !reducer) throw OutOfMemoryError("injected by FT_TEST_OOM_AT (test hook)");
        for (int64_t k = k0; k < fit.grad_accum; ++k) {
          Batch b = loader.get();
          if (k + 1 < fit.grad_accum) {
            loader.request(slice(k + 1), part(epochs, k + 1));
          } else {
            // Reading the next step's first micro-batch overlaps this backward, the gradient
            // reduction and the update: the GPU does not wait on the data between steps.
            peek_next();
            if (peeked) {
              const auto first = part(next_indices, k0), first_epochs = part(next_epochs, k0);
              prefetch.indices.assign(first.begin(), first.end());
              prefetch.epochs.assign(first_epochs.begin(), first_epochs.end());
              prefetch.pending = true;
              loader.request(first, first_epochs);
            }
          }
          const float weight = fp16 ? static_cast<float>(dloss * scaler.scale()) : dloss;
          // Data parallelism: each rank holds the gradient of its part of the global batch, each
          // unit already weighted 1 / (units of all ranks), so the sum over ranks is the step's
          // gradient. The last micro-batch's backward hands each final gradient range to the
          // reducer (train/grad_reducer.h), which sums it over ranks beside the backward.
          const bool last_micro = k + 1 == fit.grad_accum;
          GradReadyFn ready = reducer && last_micro ? reducer->hook() : GradReadyFn();
          if (ready && inject_oom)
            ready = [inner = std::move(ready)](std::span<const ParamRange> r) {
              inner(r);
              throw OutOfMemoryError("injected by FT_TEST_OOM_AT (test hook) after the backward's first gradient report");
            };
          loss_sum += model.forward_backward(b, weight, ready);
          if (k == k0) guard.after_first_micro_batch(model, st.step + 1);  // test hook only
        }
      } catch (const OutOfMemoryError& e) {
        if (!reducer) throw;  // one rank: saved and re-planned by the handler at the end
        oom_here = true;
        oom_what = e.what();
        std::fprintf(stderr, "rank %d: re-plan    out of device memory during step %lld (%s)\n", comm.rank(),
                     static_cast<long long>(st.step + 1), e.what());
        FT_USER_CHECK(reducer->drain(), "out of device memory on rank ", comm.rank(), " of ", comm.world_size(),
                      " during step ", st.step + 1, " (", e.what(), ") in a backward that reported its gradients ",
                      "unlike the step before; resume with --resume auto and a --memory-limit below what is free ",
                      "(checkpoints in ", ckdir, ")");
      }
      if (reducer) {
        // A run's first step (also resumed or re-planned) has nothing to replay: its reductions
        // waited for the backward's end, and the ranks agree that every backward completed first.
        if (reducer->holding())
          if (const int64_t failed = ranks_with(comm, oom_here)) replan_together(failed, oom_what);
        reducer->finish();
      }
      device_trace::mark("backward_queued", st.step + 1);
      // The loss, whether any rank was asked to stop (all ranks then stop after this step), and
      // the squared gradient norm from every rank's part of the reduced gradients, summed over
      // ranks on the device. With several ranks, the next step's loss units ride along (its
      // samples are known: a copy of the sampler looks one step ahead).
      double ahead = 0;
      if (comm.world_size() > 1 && st.step + 1 < total_steps) {
        peek_next();
        ahead = task->loss_units(train, next_indices);
      }
      // The update is queued before the host knows the step's gradient norm: the device derives
      // the clip factor and the verdict (a non-finite loss or norm skips the update, as the
      // guard below judges it) from the sums and AdamW reads them there, so the GPU goes from
      // the backward to the update without waiting for the host (docs/PERFORMANCE.md, session 11).
      const double unscale = fp16 ? 1.0 / scaler.scale() : 1.0;
      UpdateRule rule;
      rule.max_norm = rc.grad_clip;
      rule.unscale = unscale;
      rule.skip = no_units || guard.hooks().skip_at(st.step + 1);
      model.queue_step_sums(oom_here ? std::numeric_limits<double>::quiet_NaN() : loss_sum, stop_signal() ? 1.0 : 0.0,
                            ahead, rule, oom_here ? 1.0 : 0.0);
      AdamWStep step;
      step.lr = static_cast<float>(lr);
      step.beta1 = static_cast<float>(rc.beta1);
      step.beta2 = static_cast<float>(rc.beta2);
      step.eps = static_cast<float>(rc.eps);
      step.weight_decay = static_cast<float>(rc.weight_decay);
      step.control = model.update_control();
      // Bias correction counts applied updates only; a skipped step's update does nothing.
      step.t = st.step + 1 - static_cast<int64_t>(scaler.skipped_steps()) - st.skipped_updates;
      model.adamw_step(step);
      device_trace::mark("update_queued", st.step + 1);
      const StepSums sums = model.step_sums();  // waits for the sums' copy, not the update
      device_trace::mark("sums_done", st.step + 1);
      const double loss = no_units ? std::numeric_limits<double>::quiet_NaN() : sums.loss / units[0];
      const bool stop_agreed = sums.stop > 0;
      const double scaled_ss = sums.grad_sum_squares;
      next_units = sums.units_ahead;
      if (sums.out_of_memory > 0) replan_together(static_cast<int64_t>(sums.out_of_memory), oom_what);  // the update was skipped
      // The guard's verdict (streaks, the fp16 scaler, the log) is the device's by the same rule.
      const StepVerdict verdict = guard.judge(st.step + 1, loss, scaled_ss, fp16 ? &scaler : nullptr, st, no_units);
      FT_CHECK(verdict.apply == sums.applied, "step ", st.step + 1, ": the device ", sums.applied ? "applied" : "skipped",
               " the update but the guard judged it ", verdict.apply ? "applicable" : "bad");
      const double grad_norm = std::sqrt(scaled_ss) * unscale;
      if (verdict.bad) {
        metrics.write(guard.report_bad(model, st.step + 1, loss, grad_norm, lr, verdict), RunLog::Row::other);
        if (!verdict.scaler_skip) st.skipped_updates += 1;
      } else if (verdict.no_units) {
        metrics.write(guard.report_no_units(st.step + 1, lr), RunLog::Row::other);
        st.skipped_updates += 1;
      } else if (!verdict.apply) {
        char text[128];
        std::snprintf(text, sizeof text, "step %6lld: fp16 gradients overflowed; update skipped, loss scale now %.0f",
                      static_cast<long long>(st.step + 1), scaler.scale());
        say(text);
      }
      st.loss_scale = fp16 ? scaler.scale() : 0.0;
      st.scale_clean_steps = scaler.clean_steps();
      st.scale_skipped_steps = scaler.skipped_steps();
      st.step += 1;
      // The EMA follows applied updates only: a skipped step (non-finite, fp16 overflow) leaves
      // weights, moments and EMA as they were, so a checkpoint of the state before a streak of
      // bad steps holds that state's EMA (ema_pytorch would average towards the same weights).
      if (model.has_ema() && verdict.apply) {
        const double d = ema_decay_at(ema, st.step);
        if (d >= 0) model.ema_update(static_cast<float>(d));
      }
      trace.end_step(st.step);
      st.cursor = sampler.cursor();
      st.tokens_seen += static_cast<uint64_t>(units[0]);
      tokens_since_log += static_cast<uint64_t>(units[0]);
      samples_since_log += static_cast<uint64_t>(rc.global_batch_size);
      run_tokens += units[0];
      if (progress) {
        const double train_s = progress->training_seconds();
        progress->step_done({st.step, total_steps,
                             sampler.epochs_done(),
                             loss, train_s > 0 ? run_tokens / train_s : 0.0, task->unit_abbrev()});
      }

      if (st.step % rc.log_every == 0 || st.step == total_steps) {
        s.backend().synchronize();
        auto now = std::chrono::steady_clock::now();
        double sec = std::chrono::duration<double>(now - t_last).count();
        double tps = sec > 0 ? static_cast<double>(tokens_since_log) / sec : 0.0;
        const double sps = sec > 0 ? static_cast<double>(samples_since_log) / sec : 0.0;
        t_last = now;
        tokens_since_log = 0;
        samples_since_log = 0;
        // The data's mapped pages belong to the page cache, not to the plan: handed back at
        // every logged step, they no longer pile up in the resident set (and its peak) with
        // every page of the data the run has read.
        release_data_pages();
        const size_t rss = host_rss_bytes();
        // Every rank's arena peak, host plan and host peak into rank 0's line.
        const Session::RankMemory mem = s.memory_over_ranks();
        const size_t peak = mem.arena_peak;
        // Constant facts (the plan, the arena) were printed once at the start; the peak is
        // shown when it changes. Everything goes to the metrics file as well.
        char text[192];
        std::snprintf(text, sizeof text, "step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f %s/s | ETA %s",
                      static_cast<long long>(st.step), static_cast<long long>(total_steps), loss, lr, grad_norm, tps,
                      task->unit_abbrev(),
                      progress ? format_duration(progress->eta_seconds(st.step)).c_str() : "-");
        std::string line = text;
        if (peak != shown_peak) {
          line += " | peak " + format_bytes(peak) +
                  (comm.world_size() > 1 ? " (max of " + std::to_string(comm.world_size()) + " ranks)" : "");
          shown_peak = peak;
        }
        say(line);
        metrics.write({{"step", st.step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                       {"tokens_per_s", tps}, {"samples_per_s", sps}, {"mem_planned_bytes", fit.plan.total_bytes},
                       {"mem_peak_bytes", peak}, {"mem_peak_bytes_per_rank", mem.arena_peaks},
                       {"mem_measured_bytes", s.measured_arena_bytes()},
                       {"mem_process_planned_bytes", s.planned_process_bytes()}, {"host_rss_bytes", rss},
                       {"host_planned_bytes_per_rank", mem.host_planned}, {"host_peak_rss_bytes_per_rank", mem.host_peaks},
                       {"micro_batch_size", mb}, {"grad_accum_steps", fit.grad_accum}},
                      RunLog::Row::step);
      }
      const bool last = st.step == total_steps;
      if (!last && rc.eval_every > 0 && st.step % rc.eval_every == 0) run_eval();
      if (!last && rc.ckpt_every > 0 && st.step % rc.ckpt_every == 0) {
        if (!guard.in_streak()) save_and_prune(s, rc, &st, progress);
        else say(detail::concat("checkpoint of step ", st.step, " not written: in a streak of bad steps since step ",
                                guard.first_bad_step()));
      }
      if (guard.should_stop()) {
        save_and_prune(s, rc, guard.state_to_save(st, ckdir, !resume_from.empty()), progress);
        throw UserError(guard.stop_message(st.step, ckdir));
      }
      if (comm.world_size() > 1 ? stop_agreed : stop_signal() != 0) {
        say(stop_signal() ? detail::concat("signal ", stop_signal(), ": stopping after step ", st.step)
                          : detail::concat("a signal to another rank: stopping after step ", st.step));
        save_and_prune(s, rc, guard.state_to_save(st, ckdir, !resume_from.empty()), progress);
        say("resume with the same command and --resume auto");
        return kExitStopped;
      }
    }
    run_eval();
    if (st.step > 0 || !resume_from.empty()) {
      save_and_prune(s, rc, guard.state_to_save(st, ckdir, !resume_from.empty()), progress);
    }
  } catch (const OutOfMemoryError& e) {
    // The step in flight (or the evaluation after step st.step) is abandoned. A step's update
    // had not run (AdamW is its last op and allocates nothing), so the weights and moments are
    // those after step st.step, the state the guard saves; the sampler's cursor in st too.
    say(in_eval ? detail::concat("re-plan    out of memory in the evaluation at step ", st.step, ": ", e.what())
                : detail::concat("out of memory during step ", st.step + 1, ": ", e.what()));
    // With several ranks the others may wait in a collective: only a failure every rank has
    // learned of (an evaluation's, EvalShard) re-plans them here. Elsewhere (the update, a
    // checkpoint) the job stops (the error path ends every rank) with what to do; the newest
    // checkpoint is that of a completed step.
    FT_USER_CHECK(comm.world_size() == 1 || dynamic_cast<const RanksOutOfMemoryError*>(&e),
                  "out of device memory on rank ", comm.rank(), " of ", comm.world_size(), " after step ", st.step, " (",
                  e.what(), "); resume with --resume auto and a --memory-limit below what is free (checkpoints in ",
                  ckdir, ")");
    save_and_prune(s, rc, guard.state_to_save(st, ckdir, !resume_from.empty()), progress);
    throw ReplanNeeded(e.what(), fit.plan.total_bytes, in_eval);
  }
  if (progress) progress->finish();
  std::printf("done       %lld steps, %llu %s in %s\n", static_cast<long long>(st.step),
              static_cast<unsigned long long>(st.tokens_seen), task->unit_name(),
              format_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()).c_str());
  return 0;
}

}  // namespace

std::function<void(int64_t)> testing::before_train_step;
std::function<void(const std::string&)> testing::between_replans;
std::function<void()> testing::start_done;

int run_train(const RunConfig& rc0) {
  RunConfig rc = rc0;
  const auto started = std::chrono::steady_clock::now();  // elapsed_s counts across re-plans
  constexpr int kMaxReplans = 3;
  std::optional<ResultsDirLock> lock;  // taken by the first plan, released when the run ends
  // From the start: a signal during the start-up (planning, data, allocation) stops the run
  // after its first step as well, rather than killing the process.
  install_stop_handlers(rank_placement_from_env().launcher != RankPlacement::Launcher::none);  // any launcher
  for (int replans = 0;; ++replans) {
    try {
      return train_once(rc, started, lock);
    } catch (const ReplanNeeded& e) {
      FT_USER_CHECK(replans < kMaxReplans, "out of device memory again after ", kMaxReplans,
                    " re-plans (", e.what(), "): another process may be taking memory; free it, or pass a ",
                    "--memory-limit below what is free, and resume with --resume auto (checkpoints are kept in ",
                    checkpoint_dir(rc.results_dir), ")");
      // Same global batch, same data position: continue from the checkpoint just written,
      // with a plan strictly smaller than the one that ran out.
      rc.resume = "auto";
      rc.replan_below_bytes = e.plan_bytes;
      rc.replans = replans + 1;
      rc.evaluate_first = e.in_eval;
      std::printf("re-plan    out of memory mid-run: continuing from the last checkpoint with a plan below %s "
                  "(global batch %lld kept)\n", format_bytes(e.plan_bytes).c_str(),
                  static_cast<long long>(rc.global_batch_size));
      if (testing::between_replans) testing::between_replans(rc.results_dir);
    }
  }
}

}  // namespace ft
