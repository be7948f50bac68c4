// FT_HOST_DEVICE: a function that is host code everywhere and also __device__ code when nvcc
// compiles it, so that a CUDA kernel and its CPU reference run the very same source.
#pragma once

#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif
