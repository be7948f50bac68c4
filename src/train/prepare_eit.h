// `fittrain prepare --synthetic eit --out DIR [--train N --valid N --test N --image-size S]`:
// a simulated EIT set (data/synthetic_eit.h: phantoms, linearised voltages with noise, the
// Tikhonov baseline) written in CDEIT's layout (data/eit_dataset.h: DIR/{train,valid,test}/
// %05d.npz, DIR/mean.pth, DIR/std.pth), for `--task diffusion` without a download.
#pragma once
#include "train/config.h"

namespace ft {

int run_prepare_eit(const RunConfig& rc);

}  // namespace ft
