// Standalone probe of sm90/attention_wgmma.cu (device machine, sm_90): its wgmma building blocks
// against a CPU product (K-major and N-major operands, starts inside a swizzled row, A from
// registers), the whole backward against a double-precision CPU attention backward, and its time
// at CDEIT's shapes. Each test runs in its own process and a watchdog exits on a hang, so a
// broken layout cannot stall a device call. Session 27 measured the kernel's variants with it.
//   nvcc -std=c++20 --expt-relaxed-constexpr -O2 -Isrc -I/usr/include/x86_64-linux-gnu \
//     -gencode arch=compute_90a,code=sm_90a bench/wgmma_probe.cu src/core/tensor.cpp -o /tmp/wgmma_probe
//   for t in ss32 ss16 ss64 rs nm16 bwd64 bwd128 bwd256 time; do /tmp/wgmma_probe $t; done
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <chrono>
#include <unistd.h>
#include "../src/backend/cuda/sm90/attention_wgmma.cu"

using namespace ft;
using namespace ft::cuda;
using namespace ft::cuda::wg;
using E = bf16;

static float b2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t f2b(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }

static void wait_or_die(const char* what, double secs) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) { printf("%s: CUDA error %s\n", what, cudaGetErrorString(e)); fflush(stdout); _exit(4); }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > secs) {
      printf("%s: HUNG (no completion in %.0f s)\n", what, secs); fflush(stdout); _exit(3);
    }
    usleep(1000);
  }
}

// rows (64-wide, bf16) from global into a swizzled smem buffer, plain loads
__device__ void load_sw(uint32_t dst, const uint16_t* src, int rows) {
  for (int i = threadIdx.x; i < rows * 8; i += blockDim.x) {
    int r = i / 8, c = i % 8;
    uint4 v = *reinterpret_cast<const uint4*>(src + r * 64 + 8 * c);
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + sw(r, c)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
  }
}

// D[64 x N] = A[64 x 64] B, A K-major. TB = 0: B given as [rows][64 k] (K-major), the operand
// its rows off, off + N; TB = 1: B given as [64 k][64 n] (N-major), the operand its columns
// off, off + N (a start inside the swizzled row when off > 0).
template <int N, int TB>
__global__ void k_ss(float* D, const uint16_t* A, const uint16_t* B, int off) {
  extern __shared__ __align__(16) unsigned char sm[];
  uint32_t raw = smem_addr(sm), base = (raw + 1023u) & ~1023u;
  uint32_t sA = base, sB = base + 64 * 128;
  load_sw(sA, A, 64);
  load_sw(sB, B, 64);
  fence_async_smem();
  __syncthreads();
  float d[N / 8][4] = {};
  wg_fence();
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = TB ? nmajor(sB + kk * 16 * 128 + off * 2) : kmajor(sB + off * 128 + 32 * kk);
    mma_ss<N, TB, E>(d, kmajor(sA + 32 * kk), db, kk);
  }
  wg_commit();
  wg_wait<0>();
  fence_regs(d);
  int wq = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < N / 8; ++j)
    for (int e = 0; e < 4; ++e) D[(16 * wq + g + 8 * (e / 2)) * N + 8 * j + 2 * t + (e % 2)] = d[j][e];
}

// D[64 x 64] = A[64 x 32] B, A from registers (mma A fragments from a row-major A), B [32 x 64]
// row-major = N-major
__global__ void k_rs(float* D, const uint16_t* A, const uint16_t* B) {
  extern __shared__ __align__(16) unsigned char sm[];
  uint32_t raw = smem_addr(sm), base = (raw + 1023u) & ~1023u;
  uint32_t sB = base;
  load_sw(sB, B, 32);
  fence_async_smem();
  __syncthreads();
  int wq = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t a[2][4];
  auto at = [&](int r, int c) { return (uint32_t)A[r * 32 + c] | ((uint32_t)A[r * 32 + c + 1] << 16); };
  for (int kk = 0; kk < 2; ++kk) {
    int r0 = 16 * wq + g, c0 = 16 * kk + 2 * t;
    a[kk][0] = at(r0, c0);
    a[kk][1] = at(r0 + 8, c0);
    a[kk][2] = at(r0, c0 + 8);
    a[kk][3] = at(r0 + 8, c0 + 8);
  }
  float d[8][4] = {};
  wg_fence();
  for (int kk = 0; kk < 2; ++kk) mma_rs64<E>(d, a[kk], nmajor(sB + 16 * kk * 128));
  wg_commit();
  wg_wait<0>();
  fence_regs(d);
  fence_regs(a);
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < 4; ++e) D[(16 * wq + g + 8 * (e / 2)) * 64 + 8 * j + 2 * t + (e % 2)] = d[j][e];
}

static std::mt19937 rng(1);
static std::vector<uint16_t> rnd(size_t n, float s = 1.f) {
  std::normal_distribution<float> d(0, s);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f2b(d(rng));
  return v;
}
template <class T> T* up(const std::vector<T>& v) {
  T* p; cudaMalloc(&p, v.size() * sizeof(T)); cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); return p;
}
static double relerr(const std::vector<float>& a, const std::vector<double>& r) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) { if (!std::isfinite(a[i])) return INFINITY; n += (a[i] - r[i]) * (a[i] - r[i]); d += r[i] * r[i]; }
  return std::sqrt(n / std::max(d, 1e-300));
}

template <int N, int TB> int test_ss(int off) {
  auto A = rnd(64 * 64), B = rnd(64 * 64);
  float* D; cudaMalloc(&D, 64 * N * 4);
  cudaFuncSetAttribute(k_ss<N, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  k_ss<N, TB><<<1, 128, 3 * 1024 + 2 * 64 * 128>>>(D, up(A), up(B), off);
  printf("launch: %s\n", cudaGetErrorString(cudaGetLastError()));
  wait_or_die("ss", 10);
  std::vector<float> h(64 * N); cudaMemcpy(h.data(), D, h.size() * 4, cudaMemcpyDeviceToHost);
  std::vector<double> r(64 * N);
  auto b = [&](int k, int n) { return (double)b2f(TB ? B[k * 64 + off + n] : B[(off + n) * 64 + k]); };
  for (int m = 0; m < 64; ++m) for (int n = 0; n < N; ++n) { double s = 0; for (int k = 0; k < 64; ++k) s += (double)b2f(A[m * 64 + k]) * b(k, n); r[m * N + n] = s; }
  double e = relerr(h, r);
  printf("ss n%d B %s at %d: rel err %.3e %s\n", N, TB ? "N-major, element" : "K-major, row", off, e, e < 1e-2 ? "OK" : "BAD");
  return e < 1e-2 ? 0 : 1;
}
int test_rs() {
  auto A = rnd(64 * 32), B = rnd(32 * 64);
  float* D; cudaMalloc(&D, 64 * 64 * 4);
  cudaFuncSetAttribute(k_rs, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  k_rs<<<1, 128, 2 * 1024 + 32 * 128>>>(D, up(A), up(B));
  printf("launch: %s\n", cudaGetErrorString(cudaGetLastError()));
  wait_or_die("rs", 10);
  std::vector<float> h(64 * 64); cudaMemcpy(h.data(), D, h.size() * 4, cudaMemcpyDeviceToHost);
  std::vector<double> r(64 * 64);
  for (int m = 0; m < 64; ++m) for (int n = 0; n < 64; ++n) { double s = 0; for (int k = 0; k < 32; ++k) s += (double)b2f(A[m * 32 + k]) * b2f(B[k * 64 + n]); r[m * 64 + n] = s; }
  double e = relerr(h, r);
  printf("rs n64 (B N-major): rel err %.3e %s\n", e, e < 1e-2 ? "OK" : "BAD");
  return e < 1e-2 ? 0 : 1;
}

// the whole backward against a double CPU reference (lse from the CPU, base 2 -> stats_to_log2 = 1)
int test_bwd(int Bn, int T, int NH) {
  const int HS = 64, C = NH * HS;
  auto qkv = rnd((size_t)Bn * T * 3 * C), dout = rnd((size_t)Bn * T * C);
  std::vector<uint16_t> out((size_t)Bn * T * C);
  std::vector<float> lse((size_t)Bn * NH * T);
  std::vector<double> dq((size_t)Bn * T * 3 * C, 0.0);
  const double sc = 1.0 / 8.0;
  for (int b = 0; b < Bn; ++b)
    for (int h = 0; h < NH; ++h) {
      auto q = [&](int i, int d) { return (double)b2f(qkv[((size_t)b * T + i) * 3 * C + h * HS + d]); };
      auto k = [&](int i, int d) { return (double)b2f(qkv[((size_t)b * T + i) * 3 * C + C + h * HS + d]); };
      auto v = [&](int i, int d) { return (double)b2f(qkv[((size_t)b * T + i) * 3 * C + 2 * C + h * HS + d]); };
      auto go = [&](int i, int d) { return (double)b2f(dout[((size_t)b * T + i) * C + h * HS + d]); };
      std::vector<double> P((size_t)T * T), O((size_t)T * HS);
      for (int i = 0; i < T; ++i) {
        double mx = -1e300;
        for (int j = 0; j < T; ++j) { double s = 0; for (int d = 0; d < HS; ++d) s += q(i, d) * k(j, d); P[(size_t)i * T + j] = s * sc; mx = std::max(mx, s * sc); }
        double z = 0; for (int j = 0; j < T; ++j) z += std::exp(P[(size_t)i * T + j] - mx);
        double l = mx + std::log(z);
        lse[((size_t)b * NH + h) * T + i] = (float)(l / std::log(2.0));
        for (int j = 0; j < T; ++j) P[(size_t)i * T + j] = std::exp(P[(size_t)i * T + j] - l);
        for (int d = 0; d < HS; ++d) { double s = 0; for (int j = 0; j < T; ++j) s += P[(size_t)i * T + j] * v(j, d); O[(size_t)i * HS + d] = s; out[((size_t)b * T + i) * C + h * HS + d] = f2b((float)s); }
      }
      std::vector<double> D(T);
      for (int i = 0; i < T; ++i) { double s = 0; for (int d = 0; d < HS; ++d) s += go(i, d) * b2f(out[((size_t)b * T + i) * C + h * HS + d]); D[i] = s; }
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          double dp = 0; for (int d = 0; d < HS; ++d) dp += go(i, d) * v(j, d);
          double p = P[(size_t)i * T + j], ds = p * (dp - D[i]);
          for (int d = 0; d < HS; ++d) {
            dq[((size_t)b * T + i) * 3 * C + h * HS + d] += ds * k(j, d) * sc;
            dq[((size_t)b * T + j) * 3 * C + C + h * HS + d] += ds * q(i, d) * sc;
            dq[((size_t)b * T + j) * 3 * C + 2 * C + h * HS + d] += p * go(i, d);
          }
        }
    }
  uint16_t* d_qkv = up(qkv); uint16_t* d_do = up(dout); uint16_t* d_o = up(out); float* d_l = up(lse);
  uint16_t* d_dq; cudaMalloc(&d_dq, qkv.size() * 2); cudaMemset(d_dq, 0xff, qkv.size() * 2);
  Ctx c; c.stream = 0; c.cc_major = 9;
  attention_backward_wgmma(c, DType::bf16, d_dq, d_do, d_qkv, d_o, d_l, 1.f, Bn, T, NH);
  printf("launch: %s\n", cudaGetErrorString(cudaGetLastError()));
  wait_or_die("bwd", 20);
  std::vector<uint16_t> h(qkv.size()); cudaMemcpy(h.data(), d_dq, h.size() * 2, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a; std::vector<double> r;
    for (size_t row = 0; row < (size_t)Bn * T; ++row)
      for (int cc = 0; cc < C; ++cc) { a.push_back(b2f(h[row * 3 * C + part * C + cc])); r.push_back(dq[row * 3 * C + part * C + cc]); }
    double e = relerr(a, r);
    printf("bwd B=%d T=%d NH=%d d%c: rel err %.3e %s\n", Bn, T, NH, "qkv"[part], e, e < 2e-2 ? "OK" : "BAD");
    bad += e >= 2e-2;
  }
  // timing at CDEIT's first stage when asked
  return bad;
}

int time_bwd(int Bn, int T, int NH) {
  const int C = NH * 64;
  size_t n = (size_t)Bn * T * 3 * C;
  uint16_t *qkv, *dq, *dout, *out; float* lse;
  cudaMalloc(&qkv, n * 2); cudaMalloc(&dq, n * 2); cudaMalloc(&dout, n / 3 * 2); cudaMalloc(&out, n / 3 * 2);
  cudaMalloc(&lse, (size_t)Bn * NH * T * 4);
  cudaMemset(qkv, 0, n * 2); cudaMemset(dout, 0, n / 3 * 2); cudaMemset(out, 0, n / 3 * 2); cudaMemset(lse, 0, (size_t)Bn * NH * T * 4);
  Ctx c; c.stream = 0; c.cc_major = 9;
  attention_backward_wgmma(c, DType::bf16, dq, dout, qkv, out, lse, 1.f, Bn, T, NH);
  wait_or_die("time warmup", 20);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 20; ++i) attention_backward_wgmma(c, DType::bf16, dq, dout, qkv, out, lse, 1.f, Bn, T, NH);
  cudaEventRecord(b);
  wait_or_die("time", 30);
  float ms; cudaEventElapsedTime(&ms, a, b);
  double fl = 5.0 * 2 * (double)T * T * 64 * Bn * NH;
  printf("time B=%d T=%d NH=%d: %.3f ms, %.1f TFLOP/s\n", Bn, T, NH, ms / 20, fl / (ms / 20) / 1e9);
  return 0;
}


int main(int argc, char** argv) {
  std::string w = argc > 1 ? argv[1] : "";
  if (w == "ss32") return test_ss<32, 0>(0);
  if (w == "ss16") return test_ss<16, 0>(16);
  if (w == "ss64") return test_ss<64, 0>(0);
  if (w == "rs") return test_rs();
  if (w == "bwd64") return test_bwd(100, 64, 2);
  if (w == "bwd128") return test_bwd(70, 128, 2);
  if (w == "bwd256") return test_bwd(50, 256, 3);
  if (w == "bwd256s") return test_bwd(2, 256, 3);
  if (w == "nm16") { int r = 0; for (int o : {0, 16, 32, 48}) r += test_ss<16, 1>(o); r += test_ss<32, 1>(32); r += test_ss<64, 1>(0); return r; }
  if (w == "time") { time_bwd(512, 256, 8); time_bwd(128, 256, 8); time_bwd(32, 256, 8); time_bwd(32, 64, 8); return 0; }
  printf("unknown test\n");
  return 2;
}
