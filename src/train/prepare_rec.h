// `fittrain prepare --ratings FILE | --synthetic movielens --out DIR`: a MovieLens ratings file
// (or the synthetic ML-1M-shaped one, written as DIR/ratings.dat and read back through the
// same parser) -> DIR/interactions.rec (data/interactions.h), with a report.
#pragma once
#include "data/prepared_folder.h"  // kInteractionsRecFile, kSyntheticRatingsFile
#include "train/config.h"

namespace ft {

// True when the prepare flags ask for interactions (--ratings or --synthetic).
bool prepares_interactions(const RunConfig& rc);
int run_prepare_interactions(const RunConfig& rc);

}  // namespace ft
