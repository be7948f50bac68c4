#include "plan/shape.h"

namespace ft {

const char* recompute_name(Recompute r) { return r == Recompute::none ? "none" : "block"; }

DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::fp32: return DType::f32;
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
  }
  return DType::f32;
}
DType param_dtype(Precision p) { return activation_dtype(p); }

}  // namespace ft
