/* An OpenCL driver (ICD) that does what NVIDIA's does when an OpenCL loader opens it: it loads
 * libcuda.so.1. ctest's cuda_host_only_stub names it in OCL_ICD_VENDORS, with the CUDA toolkit's
 * stub as libcuda.so.1, so that anything that asks OpenCL for its platforms (hwloc's opencl
 * component did, at every communicator's init) maps libcuda here as it would on a GPU machine. */
#include <dlfcn.h>

__attribute__((constructor)) static void loadDriver(void) { (void)dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL); }

/* The one entry point an ICD loader asks for: no platforms here. */
int clIcdGetPlatformIDsKHR(unsigned entries, void** platforms, unsigned* count) {
  (void)entries;
  (void)platforms;
  if (count) *count = 0;
  return -1001; /* CL_PLATFORM_NOT_FOUND_KHR */
}
