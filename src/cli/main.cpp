// fittrain's command line: `fittrain train | test | sample | prepare | plan | tokenizer train | export
// [flags]`, `fittrain report RUN_DIR`.
// Users coming from `main.py --mode train` may write `fittrain --mode train [flags]`.
// Exit status: 0 success, 2 bad input (one message naming the flag or file), 3 internal
// error, 130 stopped by a signal after saving a checkpoint (none when it came before step 1).
#include <algorithm>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/cli_words.h"
#include "cli/help_topics.h"
#include "cli/config_file.h"
#include "train/build_info.h"
#include "train/spawn.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "models/registry.h"
#include "train/config.h"
#include "train/hf_interchange.h"
#include "train/trainer.h"

namespace {

// "rank R: " in the messages of a worker of a data-parallel run (every rank may print one).
std::string who() {
  try {
    const ft::RankPlacement p = ft::rank_placement_from_env();
    return p.world > 1 ? "rank " + std::to_string(p.rank) + ": " : "";
  } catch (...) {
    return "";
  }
}

// The model's shape: train and plan only (test and sample take the checkpoint's, so these flags
// are refused there instead of being silently ignored).
void add_model(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--model", c.model, "Model preset: " + ft::model_preset_names());
  app.add_option("--n-layer", c.n_layer, "Transformer blocks (0: from --model)");
  app.add_option("--n-head", c.n_head, "Attention heads (0: from --model)");
  app.add_option("--n-embd", c.n_embd, "Embedding width (0: from --model)");
  app.add_option("--seq-len", c.seq_len, "Sequence length (0: from --model)");
  app.add_option("--vocab-size", c.vocab_size, "Vocabulary size (0: from --model; tiny uses the byte tokenizer's 257)");
  app.add_option("--negatives", c.negatives, "Recommender (--model gpt2rec, sasrec): sampled negatives per position for BPR (0: the preset's 1)");
  app.add_option("--rec-loss", c.rec_loss, "Recommender: bpr (sampled negatives) or ce (full cross-entropy over every item)");
  app.add_option("--image-size", c.image_size, "DiT (--model dit-*): image height = width (0: from --model)");
  app.add_option("--patch-size", c.patch_size, "DiT: patch size, a divisor of --image-size (0: from --model)");
  app.add_option("--cond", c.cond,
                 "DiT: the condition as a vector (EIT voltages through an MLP, added to the timestep's), as a "
                 "channel (CDEIT's voltage map concatenated to the noisy image; 128x128) or none");
}

// How a training step is split and spread: train and plan only.
void add_step_split(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--micro-batch-size", c.micro_batch_size, "Sequences per device per forward/backward: auto or N");
  app.add_option("--grad-accum-steps", c.grad_accum_steps, "Micro-batches per step (0: derived from the batch sizes)");
  app.add_option("--recompute", c.recompute, "Activation recompute: auto, none or block");
  app.add_option("--zero-stage", c.zero_stage, "Optimizer-state sharding: auto, 0 or 1");
  app.add_option("--item-cache", c.item_cache,
                 "Recommender: keep every item's representation in a table each micro-batch (on: memory grows with "
                 "the catalogue) or compute only the batch's items (off: grows with the batch); auto: the planner picks");
  app.add_option("--devices", c.devices, "The GPUs to use, one worker process each: auto (all), K (the first K) or a list like 0,2");
  app.add_option("--comm-timeout", c.comm_timeout,
                 "Seconds a rank waits for the others (a collective, NCCL's or MPI's start) before the job stops with "
                 "an error");
}

// DDIM sampling of --task diffusion (train/ddim.h): evaluation (train, test) and sample.
void add_ddim(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--sample-steps", c.sample_steps, "--task diffusion: DDIM steps (CDEIT's 5; at most 1000)");
  app.add_option("--eta", c.eta, "--task diffusion: DDIM eta in [0, 1] (1: CDEIT's, fresh noise each step; 0: deterministic)");
}

// Data read by index: train, plan and test.
void add_data(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--data-path", c.data_path, "Token shards: a file, a glob or a folder (empty: built-in corpus)");
  app.add_option("--val-data-path", c.val_data_path, "Validation shards (empty: the *val* files of --data-path)");
  app.add_option("--num-workers", c.num_workers, "0: load batches inline; >= 1: a background thread loads the next micro-batch during the step (one is enough: loading copies from mmap'd shards)");
  app.add_option("--eval-batches", c.eval_batches,
                 "Batches of --global-batch-size samples per evaluation, whatever the memory or the number of "
                 "devices (0: the whole validation set)");
  app.add_option("--bleu-samples", c.bleu_samples,
                 "--task chat: BLEU-4 of greedy responses to this many validation prompts per evaluation (0: no BLEU)");
  app.add_option("--eval-max-new-tokens", c.eval_max_new_tokens, "--task chat: longest response generated for BLEU");
  app.add_option("--bleu-tokenize", c.bleu_tokenize, "--task chat: BLEU tokenization as sacrebleu's tokenize= (13a, zh, none)");
  app.add_option("--rank-users", c.rank_users,
                 "--task rec: users ranked for HR@10/NDCG@10 per evaluation (0: all)");
  app.add_option("--eval-images", c.eval_images,
                 "--task diffusion: validation images reconstructed by DDIM per evaluation for rmse/psnr/ssim "
                 "(and the data's TR beside them; 0: none)");
  add_ddim(app, c);
}

// Every command that runs a model: train, plan, test, sample.
void add_common(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--task", c.task,
                 "What is learned: lm (language modelling on token shards), chat (prompt/response pairs packed by "
                 "`prepare`: loss on responses, BLEU-4 at evaluation) or rec (next item of user histories prepared "
                 "from ratings: BPR, HR@10/NDCG@10 at evaluation; --model gpt2rec or sasrec) or diffusion (denoising EIT "
                 "images conditioned on their voltages, from an EIT folder or IMAGES.npy,CONDS.npy; --model dit-*)");
  app.add_option("--global-batch-size", c.global_batch_size,
                 "Sequences per optimizer step over all devices (test, sample: the largest evaluation batch)");
  app.add_option("--eval-batch-size", c.eval_batch_size, "Evaluation micro-batch: auto (largest that fits) or N");
  app.add_option("--memory-limit", c.memory_limit, "Device memory budget, e.g. 16GiB (empty: free memory less a margin)");
  app.add_option("--host-memory-limit", c.host_memory_limit, "Host memory the whole process may hold (empty: available memory less a margin, shared by the ranks on this machine)");
  app.add_option("--device", c.device, "auto, cpu or cuda");
  app.add_option("--precision", c.precision, "auto (bf16 on CUDA, fp32 on CPU), fp32, bf16 or fp16");
  app.add_option("--global-seed", c.global_seed, "Seed for initialisation, data order and sampling");
  app.add_option("--results-dir", c.results_dir, "Folder for checkpoints and the built-in data");
}

void add_train(CLI::App& app, ft::RunConfig& c) {
  app.add_option("--lr,--learning-rate", c.lr, "Peak learning rate");
  app.add_option("--min-lr-ratio", c.min_lr_ratio, "Final learning rate as a fraction of --lr (cosine decay)");
  app.add_option("--warmup-steps", c.warmup_steps, "Linear warmup steps");
  app.add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay (matrices and embeddings)");
  app.add_option("--beta1", c.beta1, "AdamW beta1");
  app.add_option("--beta2", c.beta2, "AdamW beta2");
  app.add_option("--eps", c.eps, "AdamW epsilon");
  app.add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm to this (0: off)");
  app.add_option("--max-bad-steps", c.max_bad_steps,
                 "A step with a non-finite loss or gradient norm is skipped (weights untouched); stop with exit 2 "
                 "after this many in a row (the newest checkpoint is then from before the first of them)");
  app.add_option("--epochs", c.epochs, "Passes over the training data (ignored when --max-steps > 0)");
  app.add_option("--max-steps", c.max_steps, "Optimizer steps (0: use --epochs)");
  app.add_option("--log-every", c.log_every, "Log a line (and a metrics record) every N steps");
  app.add_option("--eval-every", c.eval_every, "Evaluate every N steps (0: only at the end)");
  app.add_option("--ckpt-every", c.ckpt_every, "Checkpoint every N steps (0: only at the end)");
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "Keep the newest K checkpoints (0: all)");
  app.add_option("--keep-best", c.keep_best, "Also keep the K checkpoints with the lowest validation loss, beside --keep-checkpoints' newest (0: off)");
  app.add_option("--resume", c.resume, "none, auto (newest valid checkpoint in --results-dir) or a checkpoint path");
  app.add_option("--metrics-file", c.metrics_file, "Append one JSON object per logged step and evaluation (with wall_time, elapsed_s) to this file");
  app.add_option("--ema-decay", c.ema_decay,
                 "EMA of the weights (evaluated, checkpointed, sampled): its decay, ramped up as ema_pytorch's "
                 "(-1: auto, CDEIT's 0.995 with --task diffusion, off otherwise; 0: off)");
  app.add_option("--ema-every", c.ema_every, "Steps between EMA updates (CDEIT's 10)");
  app.add_option("--ema-warmup", c.ema_warmup, "Steps during which the EMA only copies the weights (CDEIT's 100)");
  app.add_option("--ema-power", c.ema_power, "Exponent of the EMA decay's ramp 1 - (1 + e)^-power (2/3; 0: no ramp)");
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a file or a pipe: the plan and the step lines then land in the
  // order they were printed relative to stderr's messages (an error never jumps above the
  // plan it follows).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // `--mode X` (the users' scripts) is the same as the subcommand X.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--mode" && i + 1 < args.size()) {
      std::string mode = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      args.insert(args.begin(), mode);
      break;
    }
    if (args[i].rfind("--mode=", 0) == 0) {
      std::string mode = args[i].substr(7);
      args.erase(args.begin() + static_cast<long>(i));
      args.insert(args.begin(), mode);
      break;
    }
  }

  ft::RunConfig c;
  CLI::App app{"fittrain: plans every byte before step one, fits the batch to the memory you have"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  auto* train = app.add_subcommand("train", "Train a model (default data: the built-in corpus)");
  auto* test = app.add_subcommand("test", "Loss and perplexity of a checkpoint on data");
  auto* sample = app.add_subcommand("sample", "Generate text from a checkpoint");
  auto* prepare = app.add_subcommand("prepare", "Turn text files into train/val token shards");
  auto* plan = app.add_subcommand("plan", "Print the memory plan and the fitted batch, without training");
  auto* tokenizer = app.add_subcommand("tokenizer", "Subword tokenizers (SentencePiece)");
  tokenizer->require_subcommand(1);
  auto* tok_train = tokenizer->add_subcommand("train", "Train a SentencePiece model on text files (one sentence per line)");
  ft::SentencePieceTrainOptions spm;
  // report reads a finished (or running) run's files: none of the training flags apply.
  auto* report = app.add_subcommand("report", "Write an HTML report and PNG charts of a run (its metrics and newest checkpoint)");
  ft::ReportOptions rep;
  // export reads a checkpoint on the host: no model, data, device or training flags.
  auto* export_cmd = app.add_subcommand("export", "Write a checkpoint as a Hugging Face GPT2LMHeadModel folder");
  for (auto* sc : {train, test, sample, plan}) {
    sc->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    add_common(*sc, c);
  }
  for (auto* sc : {train, plan}) {
    add_model(*sc, c);
    add_step_split(*sc, c);
  }
  for (auto* sc : {train, plan, test}) add_data(*sc, c);
  for (auto* sc : {train, plan}) add_train(*sc, c);
  // train only: plan writes nothing, so it does not take the flag.
  train->add_option("--tensorboard", c.tensorboard,
                    "Write the logged steps' and evaluations' scalars as TensorBoard event files into this folder");
  plan->add_flag("--json", c.json, "Print the plan as one JSON object");
  plan->add_option("--ranks", c.plan_ranks,
                   "Plan one rank of N (a run on N GPUs or under mpirun -np N); default: the GPUs --devices picks");
  for (auto* sc : {test, sample}) {
    sc->add_option("--checkpoint", c.checkpoint, "Checkpoint file, or auto (newest valid in --results-dir)");
  }
  train->add_option("--init-from", c.init_from,
                    "A Hugging Face GPT-2 folder (config.json, model.safetensors): the model's shape, and its "
                    "weights at the start of a fresh run (with --resume auto, a run that has a checkpoint continues "
                    "from it)");
  plan->add_option("--init-from", c.init_from, "A Hugging Face GPT-2 folder: plan for its config.json's model");
  test->add_option("--dump-logits", c.dump_logits,
                   "Write the first evaluation batch's logits to this file (NumPy .npy, fp32 [b, T, V])");
  test->add_option("--init-from", c.init_from,
                   "Evaluate a Hugging Face GPT-2 folder (config.json, model.safetensors) instead of a checkpoint");
  export_cmd->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  export_cmd->add_option("--format", c.export_format, "hf: a folder GPT2LMHeadModel.from_pretrained loads");
  export_cmd->add_option("--checkpoint", c.checkpoint, "Checkpoint file, or auto (newest valid in --results-dir)");
  export_cmd->add_option("--results-dir", c.results_dir, "Folder whose checkpoints --checkpoint auto looks in");
  export_cmd->add_option("--out", c.out_dir, "Folder for model.safetensors and config.json (and tokenizer.model)")->required();
  export_cmd->add_flag("--overwrite", c.overwrite, "Replace a model already in --out (refused otherwise)");
  export_cmd->add_option("--tokenizer", c.tokenizer,
                  "Tokenizer file or folder to use instead of the one the checkpoint names (same identity)");
  // several --prompt (or a --prompts-file) are generated as one batch
  sample->add_option("--prompt", c.prompts, "Text to continue (give it several times for a batch; default: 'The ')")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sample->add_option("--prompts-file", c.prompts_file, "A file of prompts, one per line, continued as a batch");
  sample->add_option("--data-path", c.data_path,
                     "--task rec checkpoints: the prepared interactions; --prompt USER_ID picks the users "
                     "(default: the first 5) whose top 10 unseen items are printed; --task diffusion: the EIT "
                     "folder whose test images are reconstructed");
  sample->add_option("--num-images", c.num_images,
                     "--task diffusion checkpoints: reconstruct the first N images of --data-path's test/ (or valid/)");
  sample->add_option("--out", c.out_dir,
                     "--task diffusion: folder for recon_*.png, compare_*.png and reconstructions.npy "
                     "(default: --results-dir/samples)");
  add_ddim(*sample, c);
  sample->add_option("--max-new-tokens", c.max_new_tokens, "Tokens to generate");
  sample->add_option("--temperature", c.temperature, "Sampling temperature (0: greedy)");
  sample->add_option("--top-k", c.top_k, "Sample among the K most likely tokens (0: all)");
  sample->add_option("--top-p", c.top_p, "Sample among the most likely tokens whose probability reaches P (1: all)");
  prepare->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  prepare->add_option("--input", c.inputs,
                      "Text files (each one document), or prompt/response files (.jsonl, .parquet, or .txt with --pairs)");
  prepare->add_option("--out", c.out_dir,
                      "Folder for train_*.bin and val_*.bin (pairs: train_*.pairs, val_*.pairs; --ratings, "
                      "--synthetic: interactions.rec)")
      ->required();
  prepare->add_flag("--pairs", c.pairs,
                    "Prompt/response pairs -> packed rows with a loss mask (implied by a .jsonl/.json/.parquet input)");
  prepare->add_option("--input-format", c.input_format,
                      "Pairs: auto (by extension), jsonl, text (PROMPT<TAB>RESPONSE lines, \\t \\n \\r \\\\ escapes) or parquet");
  prepare->add_option("--prompt-field", c.prompt_field, "Pairs: the JSON field / Parquet column of the prompt");
  prepare->add_option("--response-field", c.response_field, "Pairs: the JSON field / Parquet column of the response");
  prepare->add_option("--loss-on", c.loss_on, "Pairs: targets that count, response (and its end-of-text) or all");
  prepare->add_option("--seq-len", c.seq_len, "Pairs: positions per packed row, T (0: 1024); train with the same --seq-len");
  prepare->add_option("--val-input", c.val_inputs,
                      "Pairs: validation files, other than --input's (all of --input is then train; instead of "
                      "--val-fraction)");
  prepare->add_option("--val-fraction", c.val_fraction,
                      "Share of the data held out for validation (pairs: a seeded random share of the samples; "
                      "--ratings and --synthetic movielens split leave-one-out instead)");
  prepare->add_option("--ratings", c.ratings,
                      "A MovieLens ratings file (ratings.dat or a CSV) -> --out/interactions.rec (instead of --input)");
  prepare->add_option("--ratings-format", c.ratings_format, "--ratings: auto (by extension), dat or csv");
  prepare->add_option("--synthetic", c.synthetic,
                      "movielens: synthetic ML-1M-shaped ratings -> --out/ratings.dat and --out/interactions.rec; eit: "
                      "simulated EIT samples -> --out/{train,valid,test}/*.npz, mean.pth, std.pth (CDEIT's layout)");
  prepare->add_option("--users", c.synthetic_users, "--synthetic movielens: users (0: ML-1M's 6040)");
  prepare->add_option("--items", c.synthetic_items, "--synthetic movielens: items (0: ML-1M's 3706)");
  prepare->add_option("--train", c.synthetic_train, "--synthetic eit: train samples (-1: 1000)");
  prepare->add_option("--valid", c.synthetic_valid, "--synthetic eit: validation samples (-1: 100)");
  prepare->add_option("--test", c.synthetic_test, "--synthetic eit: test samples (-1: 100)");
  prepare->add_option("--image-size", c.image_size, "--synthetic eit: image height = width (0: CDEIT's 128)");
  prepare->add_flag("--overwrite", c.overwrite,
                    "Replace the shards, and a tokenizer of another identity, already in --out (refused otherwise); "
                    "--synthetic eit: replace an earlier EIT set, removing its numbered samples beyond the new counts");
  prepare->add_option("--global-seed", c.global_seed, "Seed for the document split (pairs: the sample split)");
  prepare->add_option("--tokenizer", c.tokenizer,
                      "A `tokenizer train` folder or a SentencePiece .model (empty: bytes, 257 tokens); "
                      "recorded beside the shards");
  sample->add_option("--tokenizer", c.tokenizer,
                     "Tokenizer file or folder to use instead of the one the checkpoint names (same identity)");
  tok_train->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  tok_train->add_option("--input", spm.inputs, "Text files")->required();
  tok_train->add_option("--vocab-size", spm.vocab_size, "Pieces in the vocabulary (>= 260)")->required();
  tok_train->add_option("--model-type", spm.model_type, "unigram or bpe");
  tok_train->add_option("--out", spm.out_dir, "Folder for tokenizer.model and tokenizer.json")->required();
  tok_train->add_flag("--overwrite", spm.overwrite, "Replace the tokenizer.model already in --out (refused otherwise)");
  tok_train->add_option("--sample-sentences", spm.sample_sentences,
                        "Train on a uniform sample of at most this many lines (bounded memory on large inputs)");
  tok_train->add_option("--character-coverage", spm.character_coverage,
                        "Share of characters given their own pieces; the rest fall back to bytes");
  tok_train->add_option("--seed", spm.seed, "Seed for the line sample");
  report->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  report->add_option("run_dir", rep.run_dir, "The run's folder (its --results-dir)")->required();
  report->add_option("--metrics-file", rep.metrics_file, "The run's metrics (JSON lines; empty: RUN_DIR/metrics.jsonl)");
  report->add_option("--out", rep.out_dir, "Folder for report.html and the PNG charts (empty: RUN_DIR/report)");

  // --config FILE: the file's settings go right after the subcommand, so every flag on the
  // command line (later, and the last value of a flag wins) overrides them.
  std::string config_path;
  for (auto* sc : {train, test, sample, prepare, plan, export_cmd})
    sc->add_option("--config", config_path, "A TOML file of settings (keys are flag names); flags given here override it");
  std::string path;                    // --config's file
  std::vector<std::string> file_flags;  // the flags it set and the command line did not
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      std::string here;
      if (args[i] == "--config" && i + 1 < args.size()) {
        here = args[i + 1];
        args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      } else if (args[i].rfind("--config=", 0) == 0) {
        here = args[i].substr(9);
        args.erase(args.begin() + static_cast<long>(i));
      } else {
        continue;
      }
      FT_USER_CHECK(i > 0, "--config comes after the subcommand (fittrain train --config FILE)");
      --i;
      FT_USER_CHECK(path.empty(), "--config given twice (", path, " and ", here,
                    "): give one file; flags on the command line override it");
      path = here;
    }
    if (!path.empty()) {
      CLI::App* sc = nullptr;
      for (auto* s : {train, test, sample, prepare, plan, export_cmd})
        if (!args.empty() && s->get_name() == args[0]) sc = s;
      const bool other_command = !args.empty() && (args[0] == "tokenizer" || args[0] == "report");
      FT_USER_CHECK(sc != nullptr, other_command ? "--config: fittrain " + args[0] + " takes no config file (train, "
                                                   "test, sample, prepare, plan and export do)"
                                                 : std::string("--config comes after the subcommand (fittrain train "
                                                               "--config FILE)"));
      std::map<std::string, ft::FlagValues> known;
      for (const CLI::Option* o : sc->get_options()) {
        const ft::FlagValues kind = o->get_expected_max() == 0 ? ft::FlagValues::kSwitch
                                    : o->get_expected_max() > 1 ? ft::FlagValues::kList
                                                                : ft::FlagValues::kOne;
        for (const std::string& n : o->get_lnames()) known["--" + n] = kind;
      }
      const std::vector<std::string> from_file = ft::config_file_args(path, known);
      for (const std::string& w : from_file)
        if (w.rfind("--", 0) == 0 && std::none_of(args.begin(), args.end(), [&](const std::string& a) {
              return a == w || a.rfind(w + "=", 0) == 0;
            }))
          file_flags.push_back(w);
      args.insert(args.begin() + 1, from_file.begin(), from_file.end());
    }
  } catch (const ft::UserError& e) {
    std::fprintf(stderr, "fittrain: error: %s\n", e.what());
    return 2;
  }
  // `help [COMMAND]`, `--version`, then typos named with the nearest command or flag.
  if (!args.empty() && args[0] == "help") {
    if (args.size() == 2)
      if (const ft::HelpTopic* t = ft::find_help_topic(args[1])) {
        std::printf("%s", t->text);
        return 0;
      }
    CLI::App* topic = &app;
    for (size_t i = 1; i < args.size(); ++i) {
      CLI::App* next = nullptr;
      std::set<std::string> names;
      for (CLI::App* sub : topic->get_subcommands([](CLI::App*) { return true; })) {
        names.insert(sub->get_name());
        if (sub->get_name() == args[i]) next = sub;
      }
      if (!next) {
        if (i == 1)
          for (const ft::HelpTopic& t : ft::help_topics()) names.insert(t.name);
        const std::string near = ft::nearest_name(args[i], names);
        std::fprintf(stderr, "fittrain: error: no help topic '%s'%s (fittrain help lists the commands and topics)\n",
                     args[i].c_str(), near.empty() ? "" : (": did you mean " + near + "?").c_str());
        return 2;
      }
      topic = next;
    }
    std::printf("%s", topic->help().c_str());
    if (topic == &app) std::printf("%s", ft::help_topic_list().c_str());
    return 0;
  }
  if (!args.empty() && (args[0] == "--version" || args[0] == "version")) {
    std::printf("%s\n", ft::build_info().c_str());
    return 0;
  }
  if (const std::string bad = ft::check_command_words(app, args); !bad.empty()) {
    std::fprintf(stderr, "fittrain: error: %s\n", bad.c_str());
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A value CLI11 cannot convert names the flag only: say when it came from the file.
    std::string where;
    const std::string what = e.what();
    for (const std::string& f : file_flags)
      if (what.find(f + " ") != std::string::npos || what.find(f + "=") != std::string::npos)
        where = ", " + f + " set by --config " + path;
    std::fprintf(stderr, "fittrain: error: %s (fittrain %s --help%s)\n", e.what(), args.empty() ? "" : args[0].c_str(),
                 where.c_str());
    return 2;
  }
  // --task's default is a task too: test and sample tell it from a --task lm that was given.
  for (CLI::App* runs_a_model : {train, test, sample, plan})
    if (*runs_a_model) c.task_given = runs_a_model->get_option("--task")->count() > 0;
  if (const std::string bad = ft::check_integer_spellings(app); !bad.empty()) {
    std::fprintf(stderr, "fittrain: error: %s\n", bad.c_str());
    return 2;
  }
  c.settings = ft::settings_text(app);  // the ranks of a run check they were given the same
  try {
    // Under mpirun or srun with several ranks, train, test and plan split their work (plan:
    // one rank of those ranks, printed by rank 0). The other commands write files a second
    // rank would race for (a sample's images, an export, prepared shards, a report).
    if (!*train && !*test && !*plan) {
      const ft::RankPlacement p = ft::rank_placement_from_env();
      if (p.world > 1) {
        std::string name;  // the subcommand's words, e.g. "tokenizer train"
        for (const CLI::App* sc = &app; !sc->get_subcommands().empty(); sc = sc->get_subcommands().front())
          name += (name.empty() ? "" : " ") + sc->get_subcommands().front()->get_name();
        throw ft::UserError("fittrain " + name + " runs as one process, but this is rank " + std::to_string(p.rank) +
                            " of " + std::to_string(p.world) + " (mpirun or srun): start it without the launcher");
      }
    }
    if (*train) {
      if (std::optional<int> status = ft::launch_if_several_gpus(c, args)) return *status;
      return ft::run_train(c);
    }
    if (*test) return ft::run_test(c);
    if (*sample) return ft::run_sample(c);
    if (*prepare) return ft::run_prepare(c);
    if (*plan) {
      // What `train` would run. On the GPUs it would use, the same workers: each measures the
      // device memory NCCL's buffers hold once the communicator has started, so the plan is the
      // run's to the byte (one process planning them would have to estimate that). --ranks N
      // for other than this machine's GPUs: one process plans one rank of N. Under mpirun or
      // srun: one rank of the launcher's.
      if (ft::rank_placement_from_env().world <= 1 &&
          (c.device == "cuda" || (c.device == "auto" && ft::cuda_available()))) {
        ft::require_cuda_device();
        const int gpus = static_cast<int>(ft::parse_devices(c.devices, ft::cuda_devices()).size());
        if (c.plan_ranks == 0 || c.plan_ranks == gpus) {
          if (std::optional<int> status = ft::launch_if_several_gpus(c, args)) return *status;
          c.plan_ranks = gpus;
        }
      } else {
        // CPU ranks and a launcher's ranks start nothing: this only checks --devices as train does.
        FT_CHECK(!ft::launch_if_several_gpus(c, args), "plan started workers without GPUs");
      }
      return ft::run_plan(c);
    }
    if (*tok_train) return ft::run_tokenizer_train(spm);
    if (*report) return ft::run_report(rep);
    if (*export_cmd) return ft::run_export(c);
  } catch (const ft::UserError& e) {
    std::fprintf(stderr, "fittrain: %serror: %s\n", who().c_str(), e.what());
    ft::abort_other_ranks_on_error(2);
    return 2;
  } catch (const ft::InternalError& e) {
    std::fprintf(stderr, "fittrain: %sinternal error: %s\n", who().c_str(), e.what());
    ft::abort_other_ranks_on_error(3);
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fittrain: %serror: %s\n", who().c_str(), e.what());
    ft::abort_other_ranks_on_error(2);
    return 2;
  }
  return 2;
}
