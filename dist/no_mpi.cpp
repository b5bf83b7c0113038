// A build without MPI: tg::dist runs as a world of one process.
#include "dist/communicator.h"

namespace tg::dist::detail {

std::unique_ptr<Communicator> make_mpi_communicator() { return nullptr; }

}  // namespace tg::dist::detail
