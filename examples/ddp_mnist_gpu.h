// The GPU half of ddp_mnist (--device cuda): the MLP's forward, loss, backward and SGD as CUDA
// kernels of our own (ddp_mnist_gpu.cu), each output element summed in the same order as the host
// trainer's loops, so the two trainers agree to float rounding (cuBLAS would pick its own order
// and its own algorithms per shape). Streams are cudaStream_t passed as void*; every call throws
// std::runtime_error naming the CUDA error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnist_gpu {

// Whether this build has the GPU half.
bool built();
int deviceCount();
void setDevice(int device);
void* streamCreate();
void streamDestroy(void* stream);
void synchronize(void* stream);

void* alloc(size_t bytes);  // device memory
void release(void* p);
void toDevice(void* dst, const void* src, size_t bytes, void* stream);
void toHost(void* dst, const void* src, size_t bytes, void* stream);  // waits for it

// z[s][o] = b[o] + sum_i W[o][i] * in[s][i], ReLU unless `last`.
void forwardLayer(const float* W, const float* b, const float* in, float* z, int batch, int nin, int nout, bool last,
                  void* stream);
// Per sample: its cross-entropy (loss[s], double) and dz[s][k] = (softmax - onehot) / denominator.
void lossGrad(const float* logits, const uint8_t* labels, int batch, int denominator, float* dz, double* loss,
              void* stream);
// dW[o][i] = sum_s dz[s][o] * a[s][i]; db[o] = sum_s dz[s][o].
void weightGrad(const float* dz, const float* a, float* dW, float* db, int batch, int nin, int nout, void* stream);
// da[s][i] = sum_o dz[s][o] * W[o][i], zero where a[s][i] <= 0 (the ReLU of the layer below).
void inputGrad(const float* dz, const float* W, const float* a, float* da, int batch, int nin, int nout, void* stream);
// torch.optim.SGD with momentum: v = momentum * v + g; w -= lr * v.
void sgd(float* w, float* v, const float* g, size_t n, float lr, float momentum, void* stream);

}  // namespace mnist_gpu
