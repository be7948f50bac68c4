// The self-spawn launcher of a data-parallel run on one machine: `fittrain train` with N GPUs
// starts one worker process per GPU itself (no mpirun, no torchrun), waits for them, and ends
// the group as soon as one fails. Process management only: the workers find each other through
// a rendezvous folder (rank 0 publishes its NCCL id there, the others wait for it).
//
// Launcher side: run_workers (fork + execv, each worker in its own process group, dies with the
// launcher), make_rendezvous_dir / remove_rendezvous_dir.
// Worker side: launched_rank_from_env (the variables below), publish / wait_for.
// Linux only (prctl(PR_SET_PDEATHSIG)).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ft {

// The environment variables a launched worker reads (the names are the contract with the worker side).
inline constexpr const char* kEnvRank = "FITTRAIN_RANK";              // 0..world-1
inline constexpr const char* kEnvWorldSize = "FITTRAIN_WORLD_SIZE";
inline constexpr const char* kEnvLocalRank = "FITTRAIN_LOCAL_RANK";
inline constexpr const char* kEnvDevice = "FITTRAIN_DEVICE";          // CUDA device ordinal of this worker
inline constexpr const char* kEnvRendezvous = "FITTRAIN_RENDEZVOUS";  // folder for rank 0's NCCL id

struct WorkerSpec {
  std::vector<std::string> argv;  // argv[0] is the program (execv path, not searched)
  // Added to (or replacing same-name entries of) the INHERITED environment; nothing else is removed.
  std::vector<std::pair<std::string, std::string>> env;
  std::string label;  // e.g. "rank 1 (cuda:1)", used in messages
};

// A worker's exit code after a clean stop (a signal, a checkpoint, then the exit): every rank
// stops after the same agreed step, so it is no failure and the others are left to finish.
inline constexpr int kExitStopped = 130;
// How long the other workers get to exit by themselves after one fails before they are
// killed: ranks that end on one agreed error (every rank of a run the numerics guard stops
// exits 2 after the same checkpoint) print their messages; a peer stuck in a collective waits
// no longer than this.
inline constexpr double kFailureGraceSeconds = 3.0;

// Starts every worker and waits for all of them. Returns 0 when all exit 0, kExitStopped when
// some exit kExitStopped and the rest 0. When a worker exits otherwise or dies by a signal,
// prints to stderr one line naming it (label, pid, "exited with code N" or "killed by signal
// SIGSEGV"), gives the others kFailureGraceSeconds to exit, then SIGKILLs those still running (a
// data-parallel peer stuck in a collective would never finish; rank 0's checkpoints are atomic
// so nothing saved is lost), reaps them, and returns that first failing worker's exit code
// (128+signal for a signal). SIGINT/SIGTERM received by the launcher are forwarded ONCE to every worker (they then
// stop cleanly after their current step), and so is SIGHUP, as SIGTERM (unless it was
// ignored, as under nohup: then it stays ignored); a second such signal SIGKILLs them. Workers run in
// their own process group, so a terminal Ctrl-C reaches only the launcher (which forwards it
// once) instead of every worker twice; signals go to a worker's whole group. Each worker has
// PR_SET_PDEATHSIG = SIGKILL, so none outlives a killed launcher (the death signal follows the
// forking *thread*: call this from the thread that lives for the whole run). An execv failure
// is reported by the child on stderr and exits 127. The launcher's own signal handlers are
// restored before returning. InternalError when the processes cannot be started (pipe, fork)
// or argv is empty; workers already started are then killed and reaped. Not reentrant.
// rendezvous_env (e.g. kEnvRendezvous): when given, a rendezvous folder (make_rendezvous_dir)
// is made once the handlers are in place, named by that variable in every worker's
// environment, and removed before they are restored, however run_workers ends: SIGINT,
// SIGTERM or SIGHUP cannot leave it behind (a signal that kills outright, SIGKILL, can).
int run_workers(const std::vector<WorkerSpec>& workers, const char* rendezvous_env = nullptr);

// The worker side: the rank this process was launched as. nullopt when none of the five
// variables is set. Otherwise FITTRAIN_RANK, FITTRAIN_WORLD_SIZE, FITTRAIN_LOCAL_RANK and
// FITTRAIN_DEVICE must all be set to decimal integers (rank and local rank below the world
// size, world size >= 1, device >= 0), and FITTRAIN_RENDEZVOUS must be set when the world
// size is above 1; UserError naming the variable otherwise.
struct LaunchedRank {
  int rank = 0, world = 1, local_rank = 0, device = 0;
  std::string rendezvous;
};
std::optional<LaunchedRank> launched_rank_from_env();

// Rendezvous through a folder on the local file system (only for workers started by
// run_workers on ONE machine).
// make_rendezvous_dir(): a fresh private folder (mkdtemp of $TMPDIR/fittrain-rdzv-XXXXXX, or
// under /tmp; mode 0700). UserError when it cannot be created.
// remove_rendezvous_dir(dir): removes it and its files; never throws. As a guard against a
// wrong argument it removes only folders named like make_rendezvous_dir's (else a line on
// stderr).
std::string make_rendezvous_dir();
void remove_rendezvous_dir(const std::string& dir);
// publish(dir, name, bytes): writes a temp file in dir, fsyncs it and renames it to `name`, so
// readers never see a partial file. `name` is a plain file name (no '/', not starting with '.').
// UserError naming the file when any step fails.
void publish(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes);
// wait_for(dir, name, timeout_s, bytes_expected): polls every 10 ms until dir/name exists and
// returns its bytes (exactly bytes_expected of them, else UserError). UserError naming the file
// and the timeout after timeout_s seconds, and early when the launcher (the parent process at
// the time of the call) has died.
std::vector<uint8_t> wait_for(const std::string& dir, const std::string& name, double timeout_s,
                              size_t bytes_expected);

// The bytes of rank 0's `generation`-th rendezvous token (the NCCL id of a run's communicator
// number `generation`: a run makes a new one each time its ranks re-plan together mid-run) on
// every rank of a fittrain launch: rank 0 makes it (make) and publishes it, the others
// wait_for it. Each generation has its own file, so a rank that gets there first never reads
// the token of the communicator before.
std::vector<uint8_t> share_from_rank0(const std::string& dir, int rank, int generation, double timeout_s,
                                      size_t bytes, const std::function<std::vector<uint8_t>()>& make);

}  // namespace ft
