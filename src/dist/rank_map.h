// Which process of a run runs where: each rank's machine, device and pid, for the line rank 0
// prints at the start (`placement`). fittrain's own launcher prints its rank -> device map
// before the workers start; under mpirun or srun the launcher placed the ranks, and only they
// know where they are, so every rank says it (all_gather_strings) and rank 0 prints them.
#pragma once
#include <string>
#include <vector>

namespace ft {

// This process's entry: "<host>\t<device>\t<pid>" (device as the caller names it: "cuda:1", "cpu").
std::string rank_entry(const std::string& device);

// The entries in rank order as one line per machine, machines in the order their first rank
// comes: "vm: rank 0 cuda:0 (pid 12), rank 1 cuda:1 (pid 13)", lines after the first indented
// by `indent`. An entry that is not "host\tdevice\tpid" is shown as it is.
std::string format_rank_map(const std::vector<std::string>& entries, const std::string& indent);

}  // namespace ft
