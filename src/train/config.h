// RunConfig: every setting of a fittrain run, filled by the CLI (cli/args.cpp) and read by
// the trainer. One flat struct with defaults here, so `--help` and the docs show the same
// values. Sizes are per run unless they say "per rank".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

struct RunConfig {
  // what to do
  std::string command = "train";  // train | test | sample | prepare | plan
  // The command's settings as parsed, one "--flag<TAB>value" line each (cli/cli_words.h:
  // settings_text). The ranks of one run compare theirs with rank 0's (train/run_checks.h);
  // "" (a config not from the command line): nothing to compare.
  std::string settings;

  // model (preset, then explicit overrides; 0 = take the preset's value)
  std::string model = "tiny";  // a preset of models/registry.cpp (tiny, gpt2, ..., gpt2-xl)
  std::string task = "lm";     // what is learned (train/task.h): lm | chat | rec | diffusion
  bool task_given = false;     // --task on the command line or in --config (test and sample check it)
  int n_layer = 0, n_head = 0, n_embd = 0, seq_len = 0, vocab_size = 0;

  // data
  std::string data_path;      // file, glob or folder; empty: the built-in corpus
  std::string val_data_path;  // empty: the folder's *val* files, if any
  int num_workers = 1;        // >= 1: a background thread prefetches the next micro-batch (0: inline)

  // batch and memory
  int64_t global_batch_size = 16;
  std::string micro_batch_size = "auto";  // "auto" or N (per rank)
  int64_t grad_accum_steps = 0;           // 0: derived
  std::string eval_batch_size = "auto";
  std::string memory_limit;       // e.g. "16GiB"; empty: free memory less margin
  std::string host_memory_limit;  // likewise for host memory
  std::string recompute = "auto"; // auto | none | block
  std::string zero_stage = "auto";

  // device
  std::string device = "auto";     // auto | cpu | cuda
  std::string devices = "auto";    // GPUs of this machine: auto (all), K (the first K) or a list "0,2"
  double comm_timeout = 600;       // seconds a rank waits for the others (a collective, NCCL's start)
  std::string precision = "auto";  // auto | fp32 | bf16 | fp16 (auto: bf16 on CUDA, fp32 on CPU)

  // optimisation
  double lr = 1e-3, min_lr_ratio = 0.1, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  int64_t warmup_steps = 20;
  double grad_clip = 1.0;  // 0: off
  int64_t max_bad_steps = 10;  // stop (exit 2) after this many non-finite steps in a row (train/step_guard.h)

  // loop
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0 overrides epochs
  int64_t log_every = 10;
  int64_t eval_every = 100;   // 0: only at the end
  int64_t eval_batches = 20;  // batches of global_batch_size samples per evaluation (0: all)
  int64_t ckpt_every = 100;   // 0: only at the end
  int keep_checkpoints = 3;   // keep the newest K (0: all)
  int keep_best = 0;          // > 0: also keep the K with the lowest validation loss (beside keep_checkpoints' newest)
  // evaluation of a generating task (--task chat): BLEU-4 of greedy responses to the first N
  // validation prompts (0: no BLEU), each at most eval_max_new_tokens long, tokenized for
  // BLEU as sacrebleu's tokenize= (13a, zh or none)
  int64_t bleu_samples = 256;
  int64_t eval_max_new_tokens = 128;
  std::string bleu_tokenize = "13a";
  // the recommender (--task rec, models gpt2rec / sasrec; train/rec_task.h)
  int negatives = 0;           // sampled negatives per position (0: the preset's, 1)
  std::string rec_loss;        // bpr | ce ("": the preset's, bpr)
  std::string item_cache = "auto";  // auto | on | off: the item table (models/gpt2_rec.h)
  int64_t rank_users = 0;      // users ranked per evaluation (0: all)
  // the diffusion model (--model dit-*, models/dit.h; --task diffusion): overrides of the preset
  int image_size = 0;   // H = W (0: the preset's); prepare --synthetic eit: the images' size (0: 128)
  int patch_size = 0;   // 0: the preset's
  std::string cond;     // vector | channel | none ("": the preset's, vector)
  // diffusion evaluation and sampling (train/ddim.h): DDIM steps (CDEIT's 5) and eta (CDEIT's
  // 1: fresh noise each step; 0: deterministic), validation images reconstructed per
  // evaluation (0: none), images `sample` reconstructs
  int sample_steps = 5;
  double eta = 1.0;
  int64_t eval_images = 64;
  int64_t num_images = 8;
  // the EMA of the weights (optim/ema.h, ema_pytorch's as CDEIT uses it): the largest decay
  // (-1: auto = 0.995 with --task diffusion, off otherwise; 0: off), steps between updates,
  // steps that only copy the weights, the decay ramp's exponent (0: no ramp)
  double ema_decay = -1;
  int64_t ema_every = 10;
  int64_t ema_warmup = 100;
  double ema_power = 2.0 / 3.0;
  std::string resume = "none";  // none | auto | PATH
  // train/plan/test: a Hugging Face GPT-2 folder (config.json + model.safetensors) whose shape
  // the run takes and, at the start of a fresh run (or in test), whose weights it loads
  // (train/hf_interchange.h). "": none.
  std::string init_from;
  uint64_t global_seed = 0;
  std::string results_dir = "results";
  std::string metrics_file;  // JSON lines; empty: none
  std::string tensorboard;   // a folder for TensorBoard event files; empty: none
  bool json = false;         // plan: print JSON

  // plan: the ranks to plan for (0: this process's, or the GPUs --devices picks)
  int plan_ranks = 0;
  // internal (not a flag): the CUDA device of a single-GPU run picked by --devices (-1: current)
  int cuda_device = -1;
  // internal (not a flag): after an out-of-memory mid-run, the arena must plan below this
  size_t replan_below_bytes = 0;
  // internal (not a flag): the re-plans mid-run so far; the Session's communicator is the run's
  // communicator number `replans` (RankPlacement::generation)
  int replans = 0;
  // internal (not a flag): the re-planned run first repeats the evaluation that ran out of memory
  bool evaluate_first = false;
  // Internal, not a flag: a rank other than 0 of a data-parallel run writes nothing to
  // --results-dir (the built-in corpus is read where rank 0 wrote it).
  bool results_read_only = false;

  // test / sample
  std::string checkpoint = "auto";  // auto: newest valid in results-dir/checkpoints
  std::string dump_logits;  // test: write the first evaluation batch's logits here (.npy, fp32 [b, T, V])
  std::string prompt = "The ";      // sample: the prompt when prompts and prompts_file are empty
  std::vector<std::string> prompts;  // sample: --prompt, once per prompt (a batch)
  std::string prompts_file;          // sample: one prompt per line (added after --prompt's)
  int64_t max_new_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  double top_p = 1.0;

  // export
  std::string export_format = "hf";  // hf: Hugging Face GPT2LMHeadModel folder

  // prepare
  std::vector<std::string> inputs;
  std::string out_dir;  // prepare: the shards' folder; export: the exported model's folder
  double val_fraction = 0.1;
  bool overwrite = false;  // prepare: replace the shards already in --out
  // prepare: the tokenizer for the shards ("": bytes; a `tokenizer train` folder or a .model);
  // sample: overrides the tokenizer file the checkpoint names (its identity is still checked)
  std::string tokenizer;
  // prepare, prompt/response data (data/prepare_pairs.h): on with --pairs, or implied by a
  // JSONL/Parquet input or --val-input; rows of --seq-len positions (0: 1024)
  bool pairs = false;
  std::string input_format = "auto";  // auto (by extension) | jsonl | text | parquet
  std::string prompt_field = "prompt", response_field = "response";
  std::string loss_on = "response";   // response | all
  std::vector<std::string> val_inputs;  // explicit validation pairs (instead of --val-fraction)
  // prepare, interactions (train/prepare_rec.h): a MovieLens ratings file, or synthetic
  // ("movielens") ratings of --users x --items (0: ML-1M's 6040 x 3706) -> --out/interactions.rec
  std::string ratings;
  std::string ratings_format = "auto";  // auto (by extension) | dat | csv
  std::string synthetic;
  uint32_t synthetic_users = 0, synthetic_items = 0;
  // prepare --synthetic eit (train/prepare_eit.h): samples per split (-1: the default)
  int64_t synthetic_train = -1, synthetic_valid = -1, synthetic_test = -1;
};

}  // namespace ft
