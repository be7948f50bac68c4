// How a run is asked to stop: SIGINT, SIGTERM or SIGHUP (its terminal or ssh session gone;
// unless ignored, as under nohup) is recorded, and the training loop ends after
// the step in flight with a checkpoint (on one rank, a signal during the start-up stops it
// before step 1). Several ranks agree on the stop in a step's sums (trainer.cpp).
#pragma once

namespace ft {

// Installs the handlers and forgets a signal an earlier run in this process recorded. ranked:
// a rank of a launcher (fittrain's, which kills its workers on a second interrupt; mpirun's or
// srun's, which escalate themselves) keeps its clean stop on a second signal, as a job
// manager signalling every process (scancel, systemd) reaches it twice; a single process
// stops at once on a second one.
void install_stop_handlers(bool ranked);

// The first signal received since install_stop_handlers, or 0.
int stop_signal();

}  // namespace ft
