// ddp_mnist without its GPU half (a build without the CUDA toolkit): --device cuda says so.
#include <stdexcept>

#include "ddp_mnist_gpu.h"

namespace mnist_gpu {
namespace {
[[noreturn]] void none() {
  throw std::runtime_error("--device cuda: this build has no CUDA (the toolkit was not found); use --device host");
}
}  // namespace

bool built() { return false; }
int deviceCount() { return 0; }
void setDevice(int) { none(); }
void* streamCreate() { none(); }
void streamDestroy(void*) {}
void synchronize(void*) { none(); }
void* alloc(size_t) { none(); }
void release(void*) {}
void toDevice(void*, const void*, size_t, void*) { none(); }
void toHost(void*, const void*, size_t, void*) { none(); }
void forwardLayer(const float*, const float*, const float*, float*, int, int, int, bool, void*) { none(); }
void lossGrad(const float*, const uint8_t*, int, int, float*, double*, void*) { none(); }
void weightGrad(const float*, const float*, float*, float*, int, int, int, void*) { none(); }
void inputGrad(const float*, const float*, const float*, float*, int, int, int, void*) { none(); }
void sgd(float*, float*, const float*, size_t, float, float, void*) { none(); }

}  // namespace mnist_gpu
