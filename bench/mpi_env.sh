# Sourced by the bench/ scripts that run bench_ddp under mpirun: one thread a process, and
# Open MPI allowed to run as root (it refuses unless told).
export OMP_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
