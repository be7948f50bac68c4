#!/usr/bin/env bash
# Debian 12's Open MPI runtime (mpirun and the libraries it needs) as .deb files in
# .debs/ompi/, to carry to the GPU machine, whose image has MPI's library but no mpirun:
# scripts/device_mpi_env.sh unpacks them there so `mpirun -np 2 fittrain train ...` (GPU ranks,
# NCCL's id through MPI) can be exercised. Run here, then carry [".debs"].
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs/ompi
cd .debs/ompi
apt-get download openmpi-bin libopenmpi3 openmpi-common libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 \
  libevent-2.1-7 libhwloc15 libhwloc-plugins libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 \
  libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libxnvctrl0 libmunge2 libnuma1
echo "wrote $(ls | wc -l) packages to .debs/ompi ($(du -sh . | cut -f1))"
