// The CPU backend: fp32 kernels with OpenMP, matrix products through OpenBLAS.
// It is also the reference every other backend is tested against.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace ft {
std::unique_ptr<Backend> make_cpu_backend();
}
