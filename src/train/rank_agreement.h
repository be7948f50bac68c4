// What the ranks of a run check together and say at its start, beyond the flags and the plan
// (Session::agree_on_settings, Session::fit): that they see the results folder rank 0 holds,
// and where each runs. Collectives: every rank calls them at the same point of train_once.
#pragma once
#include <string>

#include "train/session.h"

namespace ft {

// Rank 0 holds the folder's lock (train/results_dir.h); a rank that does not see its holder
// there reads another folder (a machine's own disk), where it would not find the checkpoint
// rank 0 resumes from, or would read another run's: UserError naming the folder, the machine
// and both holders. A rank whose file system shows rank 0's write late (NFS's attribute
// cache) looks again for 10 s first.
void agree_on_results_dir(Session& s, const std::string& results_dir);

// Rank 0's lines about the ranks: how many, its communicator, the switches that keep NVLink
// multicast off as it sees them; under mpirun or srun (whose ranks alone know where they run)
// every rank's machine, device and pid (`placement`).
void print_ranks(Session& s);

}  // namespace ft
