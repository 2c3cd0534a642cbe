// The GPU half of ddp_mnist (ddp_mnist_gpu.h). One thread per output element, each summing in the
// host trainer's order (ddp_mnist.cc), compiled without contraction (--fmad=false) as the host
// code is, so every product is rounded before it is added, as on the host.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "ddp_mnist_gpu.h"

namespace mnist_gpu {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr int kThreads = 256;
unsigned blocksFor(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
cudaStream_t cs(void* s) { return static_cast<cudaStream_t>(s); }

__global__ void forwardKernel(const float* W, const float* b, const float* in, float* z, int batch, int nin, int nout,
                              bool last) {
  const size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (k >= size_t(batch) * nout) return;
  const int s = static_cast<int>(k / nout), o = static_cast<int>(k % nout);
  const float* row = W + size_t(o) * nin;
  const float* a = in + size_t(s) * nin;
  float acc = 0.0f;
  for (int i = 0; i < nin; ++i) acc += row[i] * a[i];
  acc += b[o];
  z[k] = !last && acc < 0.0f ? 0.0f : acc;
}

__global__ void lossKernel(const float* logits, const uint8_t* labels, int batch, int denominator, float* dz,
                           double* loss) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= batch) return;
  const float* z = logits + size_t(s) * 10;
  float mx = z[0];
  for (int k = 1; k < 10; ++k) mx = fmaxf(mx, z[k]);
  double sum = 0;
  for (int k = 0; k < 10; ++k) sum += exp(double(z[k] - mx));
  loss[s] = log(sum) - (z[labels[s]] - mx);
  for (int k = 0; k < 10; ++k) {
    const double p = exp(double(z[k] - mx)) / sum;
    dz[size_t(s) * 10 + k] = static_cast<float>((p - (k == labels[s] ? 1.0 : 0.0)) / denominator);
  }
}

__global__ void weightGradKernel(const float* dz, const float* a, float* dW, float* db, int batch, int nin, int nout) {
  const size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (k >= size_t(nout) * nin) return;
  const int o = static_cast<int>(k / nin), i = static_cast<int>(k % nin);
  float acc = 0.0f, bacc = 0.0f;
  for (int s = 0; s < batch; ++s) {
    const float g = dz[size_t(s) * nout + o];
    if (g == 0.0f) continue;
    acc += g * a[size_t(s) * nin + i];
    bacc += g;
  }
  dW[k] = acc;
  if (i == 0) db[o] = bacc;
}

__global__ void inputGradKernel(const float* dz, const float* W, const float* a, float* da, int batch, int nin,
                                int nout) {
  const size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (k >= size_t(batch) * nin) return;
  const int s = static_cast<int>(k / nin), i = static_cast<int>(k % nin);
  float acc = 0.0f;
  for (int o = 0; o < nout; ++o) {
    const float g = dz[size_t(s) * nout + o];
    if (g == 0.0f) continue;
    acc += g * W[size_t(o) * nin + i];
  }
  da[k] = a[k] <= 0.0f ? 0.0f : acc;
}

__global__ void sgdKernel(float* w, float* v, const float* g, size_t n, float lr, float momentum) {
  const size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  v[k] = momentum * v[k] + g[k];
  w[k] -= lr * v[k];
}

}  // namespace

bool built() { return true; }

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

void setDevice(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

void* streamCreate() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}

void streamDestroy(void* stream) { (void)cudaStreamDestroy(cs(stream)); }
void synchronize(void* stream) { check(cudaStreamSynchronize(cs(stream)), "cudaStreamSynchronize"); }

void* alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}

void release(void* p) { (void)cudaFree(p); }

void toDevice(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cs(stream)), "cudaMemcpyAsync to the device");
}

void toHost(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cs(stream)), "cudaMemcpyAsync to the host");
  synchronize(stream);
}

void forwardLayer(const float* W, const float* b, const float* in, float* z, int batch, int nin, int nout, bool last,
                  void* stream) {
  forwardKernel<<<blocksFor(size_t(batch) * nout), kThreads, 0, cs(stream)>>>(W, b, in, z, batch, nin, nout, last);
  check(cudaGetLastError(), "the forward kernel");
}

void lossGrad(const float* logits, const uint8_t* labels, int batch, int denominator, float* dz, double* loss,
              void* stream) {
  lossKernel<<<blocksFor(batch), kThreads, 0, cs(stream)>>>(logits, labels, batch, denominator, dz, loss);
  check(cudaGetLastError(), "the loss kernel");
}

void weightGrad(const float* dz, const float* a, float* dW, float* db, int batch, int nin, int nout, void* stream) {
  weightGradKernel<<<blocksFor(size_t(nout) * nin), kThreads, 0, cs(stream)>>>(dz, a, dW, db, batch, nin, nout);
  check(cudaGetLastError(), "the weight-gradient kernel");
}

void inputGrad(const float* dz, const float* W, const float* a, float* da, int batch, int nin, int nout, void* stream) {
  inputGradKernel<<<blocksFor(size_t(batch) * nin), kThreads, 0, cs(stream)>>>(dz, W, a, da, batch, nin, nout);
  check(cudaGetLastError(), "the input-gradient kernel");
}

void sgd(float* w, float* v, const float* g, size_t n, float lr, float momentum, void* stream) {
  sgdKernel<<<blocksFor(n), kThreads, 0, cs(stream)>>>(w, v, g, n, lr, momentum);
  check(cudaGetLastError(), "the SGD kernel");
}

}  // namespace mnist_gpu
