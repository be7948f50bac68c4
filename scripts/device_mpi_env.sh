# Sourced on the GPU machine: unpacks the Open MPI runtime carried in .debs/ompi (made by
# scripts/make_device_mpi.sh) under /tmp/ompi and points PATH, the loader and Open MPI's
# relocation (OPAL_PREFIX) at it, so `mpirun` runs there. Source it after the build: this
# runtime has no headers, and CMake's FindMPI would take it from PATH and fail to configure.
if [[ ! -x /tmp/ompi/usr/bin/mpirun ]]; then
  mkdir -p /tmp/ompi
  for d in .debs/ompi/*.deb; do dpkg -x "$d" /tmp/ompi; done
  # Debian names it mpirun.openmpi (update-alternatives makes mpirun at install, not dpkg -x)
  ln -sf orterun /tmp/ompi/usr/bin/mpirun
fi
export OPAL_PREFIX=/tmp/ompi/usr
export PATH=/tmp/ompi/usr/bin:$PATH
export LD_LIBRARY_PATH=/tmp/ompi/usr/lib/x86_64-linux-gnu:/tmp/ompi/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
