// The training loop and the evaluation commands built on a Session.
#pragma once
#include "train/config.h"

namespace ft {

// `fittrain train`: returns the process exit status (0, or 130 after a signal stopped it
// cleanly with a checkpoint).
int run_train(const RunConfig& rc);
// `fittrain test`: loss and perplexity of a checkpoint on data.
int run_test(const RunConfig& rc);
// `fittrain sample`: text generated from a checkpoint.
int run_sample(const RunConfig& rc);
// `fittrain plan`: the memory plan, without training.
int run_plan(const RunConfig& rc);
// `fittrain prepare`: text files to token shards.
int run_prepare(const RunConfig& rc);

}  // namespace ft
