#include "cli/help_topics.h"

#include <cstdio>

namespace ft {

const std::vector<HelpTopic>& help_topics() {
  static const std::vector<HelpTopic> topics = {
      {"memory", "how the plan and the batch are fitted, and what --memory-limit means",
       R"(Memory: every byte is planned before step one.

`fittrain plan` (same flags as train) prints the plan without training: parameters,
gradients, optimizer state, activations (shared by lifetime in one arena), the workspace,
the generation KV cache, the host buffers, and the whole process (CUDA context, libraries,
NCCL's buffers: on this machine's GPUs plan starts the workers train would and measures
them; --ranks N for other GPUs estimates them and says so).
The run then allocates exactly that arena and reports planned vs measured.

You ask for --global-batch-size (over all devices). fittrain finds the largest micro-batch
that fits the budget, takes the fewest accumulation steps it allows (the global batch stays
exact) and spreads the batch evenly over them; ZeRO-1 optimizer sharding (--zero-stage 1)
with several ranks, and activation recompute (--recompute block) when even one sample does
not fit without it, or on a GPU when it lets a micro-batch so much larger fit that it is
predicted at least 5% faster (plan says so). --memory-limit 16GiB plans for a smaller
device than the one you have (the budget is per device); the default is the free memory
less a margin.
Host memory is planned too: what the process holds when it plans, the blocks the weights
and checkpoints pass through (no rank copies the whole model to the host; --init-from's
folder is read a tensor at a time), batch buffers and an allowance for what GPU libraries
load at the first step; the metrics report each rank's
peak resident set beside it. --host-memory-limit bounds the whole process; by default the
ranks on one machine each plan for their share of its available memory.
If memory is taken away mid-run, the run re-plans below what is free and continues from its
last completed step; with several devices every rank re-plans together when one runs out
inside a step or an evaluation.

  fittrain plan --model gpt2-xl --global-batch-size 64 --memory-limit 16GiB
  fittrain plan --model gpt2-xl --ranks 4 --memory-limit 16GiB --json
Read next: docs/DESIGN.md (plan), docs/PERFORMANCE.md (planned vs measured).
)"},
      {"data", "which files each task reads and how to make them",
       R"(Data: `fittrain prepare` writes shards; a task reads them.

--task lm (default): token shards (*.bin, llm.c's format or fittrain's uint32 variant).
  fittrain prepare --input a.txt b.txt --out data/mine        (each file one document)
  fittrain train --data-path data/mine                          (a file, glob or folder)
--task chat: packed prompt/response rows (*.pairs), loss on responses, BLEU-4 at evaluation.
  fittrain prepare --input pairs.jsonl --out data/chat --seq-len 256
     inputs: JSONL {"prompt", "response"} (--prompt-field/--response-field), Parquet
     string columns, or text lines PROMPT<TAB>RESPONSE; --val-input for a separate
     validation file; --loss-on response|all
  fittrain train --task chat --data-path data/chat --seq-len 256 --bleu-samples 256
Subwords: fittrain tokenizer train --input corpus.txt --vocab-size 32000 --out data/tok,
then prepare --tokenizer data/tok; the shards record the tokenizer and training refuses a
mismatch. Without --data-path, train uses a built-in English-like corpus.
Read next: docs/DESIGN.md (data, prompt/response data).
)"},
      {"devices", "using several GPUs, machines (mpirun, srun) or CPU ranks",
       R"(Devices: one process per GPU, started by fittrain itself.

On a machine with N GPUs, `fittrain train` uses all of them (--devices auto), or the first
K (--devices K) or a list (--devices 0,2). It prints which rank runs on which device and
how the global batch splits (global = ranks x micro-batch x accumulation; one that does not
divide by the ranks leaves the last ones a sample fewer, as many micro-steps each); rank 0 writes
logs, metrics and checkpoints. Gradients are reduced with NCCL while the backward runs;
with several ranks the optimizer state is sharded (ZeRO-1) by default. Evaluations are
split too: each rank takes its part of the batches (images, prompts, users) and the sums
are added over the ranks, so every rank reports the whole split's metrics.
Several machines, or CPU ranks: start fittrain under mpirun or srun; the ranks come from
the launcher, NCCL's id travels over MPI, CPU ranks reduce over MPI:
  mpirun -np 8 fittrain train --model gpt2 --data-path data/fineweb --global-batch-size 512
Every rank takes the same flags; only --memory-limit, --host-memory-limit and
--eval-batch-size may differ per rank (the ranks agree on one plan). Over several machines
--results-dir must be one shared folder and the data the same on each: a rank that does not
see rank 0's folder, reads other data or opened another checkpoint is refused, naming it.
A rank that fails (error, dead process, --comm-timeout) ends the whole job naming it.
Resume works on a different number of devices: same global batch, same data position.
Read next: docs/DESIGN.md (data parallelism), docs/RELIABILITY.md.
)"},
      {"checkpoints", "what is saved, resuming, keeping the best, exporting",
       R"(Checkpoints: atomic, complete, resumable anywhere.

Every --ckpt-every steps (and at the end, and on SIGINT/SIGTERM/SIGHUP) rank 0 writes
results-dir/checkpoints/ckpt_step_N.ftc: weights, fp32 master weights, Adam moments (whole,
so another number of devices can resume), the data position, the run's settings and the
data's tokenizer; written to a temporary file, fsynced, renamed. --keep-checkpoints K keeps
the newest K; --keep-best K also keeps the K with the lowest validation loss (and the newest).
  fittrain train ... --resume auto          continue from the newest valid checkpoint
  fittrain test --results-dir R             loss (and BLEU for chat) of the newest one
  fittrain sample --results-dir R --prompt "Once" --top-p 0.9
  fittrain export --format hf --results-dir R --out hf/   a transformers GPT2LMHeadModel folder
  fittrain train --init-from hf/ ...        start (fine-tune) from such a folder
Read next: docs/RELIABILITY.md.
)"},
  };
  return topics;
}

const HelpTopic* find_help_topic(const std::string& name) {
  for (const HelpTopic& t : help_topics())
    if (name == t.name) return &t;
  return nullptr;
}

std::string help_topic_list() {
  std::string s = "\nTopics (fittrain help TOPIC):\n";
  for (const HelpTopic& t : help_topics()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-28s%s\n", t.name, t.summary);
    s += line;
  }
  return s;
}

}  // namespace ft
