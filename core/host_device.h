// TG_HD marks the functions compiled for the host and, under nvcc, for CUDA devices too: the
// scalar math both backends share is written once.
#pragma once

#ifdef __CUDACC__
#define TG_HD __host__ __device__
#else
#define TG_HD
#endif
