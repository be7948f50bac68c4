// Recommender head: fused BPR scoring + loss + gradients over a tied item table, with a
// deterministic scatter into dE, and candidate scoring for evaluation.
//
// bpr_forward_backward: one warp per row. Each lane takes channels lane, lane+32, ... (scalar
// loads: any C, no alignment needed), x_k = h . (E[pos] - E[neg_k]) is reduced with the
// fixed xor butterfly, so every lane holds the same x_k and the same coefficients. Slot s of
// row n (0: the positive, 1+k: negative k) gets coef = dloss*sum_k g_k or -dloss*g_k
// (g = sigmoid(x) - 1), written to scratch with its item as sort key (padding rows and
// dropped negatives: the sentinel key Vp). dh[n] = sum_slots coef * E[item].
// dE: as embedding_backward, the (key, slot) pairs are radix-sorted (stable) and the first
// slot of each run of equal items sums coef * h[row] over its run in slot order, in fp32, and
// adds the sum to dE[item] once: the same bits for the same inputs.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_ops.cuh"

namespace ft::cuda {

namespace {
constexpr int kBprThreads = 256;  // 8 rows (warps) a block

__device__ __forceinline__ float neg_log_sigmoid(float x) {
  return fmaxf(-x, 0.f) + log1pf(expf(-fabsf(x)));
}
__device__ __forceinline__ float sigmoid_minus_one(float x) {  // sigmoid(x) - 1 = -sigmoid(-x)
  if (x >= 0) {
    const float e = expf(-x);
    return -e / (1.f + e);
  }
  return -1.f / (1.f + expf(x));
}
}  // namespace

// ---- CUDA kernels ---------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kBprThreads)
    bpr_rows_kernel(float* losses, T* dh, float* coef, int* keys, const T* h, const T* E,
                    const int* pos, const int* neg, int64_t N, int64_t C, int64_t K, int64_t Vp,
                    float dloss) {
  const int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const bool grad = dloss != 0.f;
  const int64_t S = K + 1;
  const int p = pos[n];
  const T* hn = h + n * C;
  if (p < 0 || p >= Vp) {  // padding row
    if (lane == 0) losses[n] = 0.f;
    if (grad) {
      for (int64_t c = lane; c < C; c += 32) dh[n * C + c] = from_f32<T>(0.f);
      for (int64_t s = lane; s < S; s += 32) {
        coef[n * S + s] = 0.f;
        keys[n * S + s] = (int)Vp;
      }
    }
    return;
  }
  const T* ep = E + (int64_t)p * C;
  float loss = 0.f, gsum = 0.f;
  for (int64_t k = 0; k < K; ++k) {
    const int q = neg[n * K + k];
    const bool valid = q >= 0 && q < Vp;
    float x = 0.f;
    if (valid) {
      const T* en = E + (int64_t)q * C;
      for (int64_t c = lane; c < C; c += 32) x += to_f32(hn[c]) * (to_f32(ep[c]) - to_f32(en[c]));
    }
    x = warp_sum(x);  // every lane: the same value
    if (!valid) {
      if (grad && lane == 0) coef[n * S + 1 + k] = 0.f, keys[n * S + 1 + k] = (int)Vp;
      continue;
    }
    loss += neg_log_sigmoid(x);
    if (grad) {
      const float g = sigmoid_minus_one(x);
      gsum += g;
      if (lane == 0) coef[n * S + 1 + k] = -dloss * g, keys[n * S + 1 + k] = q;
    }
  }
  if (lane == 0) losses[n] = loss;
  if (!grad) return;
  const float c0 = dloss * gsum;
  if (lane == 0) coef[n * S] = c0, keys[n * S] = p;
  __syncwarp();  // lane 0's coefficients, visible to the whole warp
  for (int64_t c = lane; c < C; c += 32) {
    float acc = c0 * to_f32(ep[c]);
    for (int64_t k = 0; k < K; ++k) {
      const int q = neg[n * K + k];
      if (q >= 0 && q < Vp) acc += coef[n * S + 1 + k] * to_f32(E[(int64_t)q * C + c]);
    }
    dh[n * C + c] = from_f32<T>(acc);
  }
}

__global__ void bpr_iota_kernel(int* v, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<int>(i);
}

// Block x = slot i in key-sorted order; only the first slot of each run of equal items works
// (the sentinel Vp is skipped). blockIdx.y/threadIdx.x cover the channels.
template <class T>
__global__ void bpr_scatter_kernel(T* dE, const T* h, const float* coef, const int* keys,
                                   const int* slots, int64_t M, int64_t S, int64_t C, int64_t Vp) {
  const int64_t i = blockIdx.x;
  const int item = keys[i];
  if (item >= Vp || (i > 0 && keys[i - 1] == item)) return;
  const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t j = i; j < M && keys[j] == item; ++j) {
    const int s = slots[j];
    acc += coef[s] * to_f32(h[(int64_t)(s / S) * C + c]);
  }
  T* dst = dE + (int64_t)item * C + c;
  *dst = from_f32<T>(to_f32(*dst) + acc);
}

// One warp per (row, candidate).
template <class T>
__global__ void item_scores_kernel(float* out, const T* h, const T* E, const int* items,
                                   int64_t N, int64_t M, int64_t C, int64_t Vp) {
  const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= N * M) return;
  const int it = items[w];
  if (it < 0 || it >= Vp) {
    if (lane == 0) out[w] = __int_as_float(0x7fc00000);  // NaN: an id the caller got wrong
    return;
  }
  const T* hn = h + (w / M) * C;
  const T* e = E + (int64_t)it * C;
  float acc = 0.f;
  for (int64_t c = lane; c < C; c += 32) acc += to_f32(hn[c]) * to_f32(e[c]);
  acc = warp_sum(acc);
  if (lane == 0) out[w] = acc;
}

// ---- kernel launchers -----------------------------------------------------------------------

// Scratch layout: coef[M] f32 | keys_in[M] | keys_out[M] | slots_in[M] | slots_out[M] | cub
// temp, M = N*(K+1) slots.
size_t bpr_scratch(int64_t N, int64_t K) {
  const int64_t M = N * (K + 1);
  size_t temp = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int*)nullptr, (int*)nullptr,
                                             (const int*)nullptr, (int*)nullptr, (int)M, 0, 32));
  return 5 * align_up(M * sizeof(int), 256) + align_up(temp, 256);
}

void bpr_forward_backward(const Ctx& c, DType t, float* losses, void* dh, void* dE,
                          const void* h, const void* E, const int* pos, const int* neg,
                          int64_t N, int64_t C, int64_t K, int64_t Vp, float dloss) {
  if (N == 0) return;
  const bool grad = dloss != 0.f;
  const int64_t S = K + 1, M = N * S;
  FT_CHECK(M < (int64_t(1) << 31), "bpr: ", M, " slots exceed the sort's int indices");
  float* coef = nullptr;
  int *keys_in = nullptr, *keys_out = nullptr, *slots_in = nullptr, *slots_out = nullptr;
  char* s = static_cast<char*>(c.scratch);
  size_t temp = 0;
  if (grad) {
    FT_CHECK(bpr_scratch(N, K) <= c.scratch_bytes,
             "bpr: workspace too small (size it with OpShape::bpr)");
    const size_t a = align_up(M * sizeof(int), 256);
    coef = reinterpret_cast<float*>(s), s += a;
    keys_in = reinterpret_cast<int*>(s), s += a;
    keys_out = reinterpret_cast<int*>(s), s += a;
    slots_in = reinterpret_cast<int*>(s), s += a;
    slots_out = reinterpret_cast<int*>(s), s += a;
    temp = c.scratch_bytes - (s - static_cast<char*>(c.scratch));
  }
  int end_bit = 1;  // keys in [0, Vp]: Vp is the sentinel
  while (end_bit < 32 && (int64_t(1) << end_bit) <= Vp) ++end_bit;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const int rows_per_block = kBprThreads / 32;
    bpr_rows_kernel<T><<<(unsigned)ceil_div(N, rows_per_block), kBprThreads, 0, c.stream>>>(
        losses, static_cast<T*>(dh), coef, keys_in, static_cast<const T*>(h),
        static_cast<const T*>(E), pos, neg, N, C, K, Vp, dloss);
    CUDA_CHECK_LAUNCH();
    if (!grad) return;
    bpr_iota_kernel<<<(unsigned)ceil_div(M, 256), 256, 0, c.stream>>>(slots_in, M);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s, temp, keys_in, keys_out, slots_in, slots_out,
                                               (int)M, 0, end_bit, c.stream));
    const int threads = (int)std::min<int64_t>(128, ceil_div(C, 32) * 32);
    dim3 grid((unsigned)M, (unsigned)ceil_div(C, threads));
    bpr_scatter_kernel<T><<<grid, threads, 0, c.stream>>>(
        static_cast<T*>(dE), static_cast<const T*>(h), coef, keys_out, slots_out, M, S, C, Vp);
    CUDA_CHECK_LAUNCH();
  });
}

void item_scores(const Ctx& c, DType t, float* out, const void* h, const void* E,
                 const int* items, int64_t N, int64_t M, int64_t C, int64_t Vp) {
  if (N * M == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const int per_block = kBprThreads / 32;
    item_scores_kernel<T><<<(unsigned)ceil_div(N * M, per_block), kBprThreads, 0, c.stream>>>(
        out, static_cast<const T*>(h), static_cast<const T*>(E), items, N, M, C, Vp);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ft::cuda
