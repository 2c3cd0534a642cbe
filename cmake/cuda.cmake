# CUDA: when the toolkit is found, nvcc compiles the device reductions for
# CHORUS_CUDA_ARCHITECTURES in every build (named, since `native` fails without a GPU). Nothing
# CUDA runs on a machine without a device; the device test then skips and says so.
set(CHORUS_CUDA_FOUND OFF)
if(CHORUS_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # CMake 3.25 predates nvcc 13 and does not know its C++20 flag; teach it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    # The device layer: the element reductions and the primitives' kernel (src/device), which sees
    # common, kernels and algo only.
    add_library(chorus_device STATIC kernels/reduce_device.cu src/device/prims_device.cu)
    set_target_properties(chorus_device PROPERTIES CUDA_ARCHITECTURES "${CHORUS_CUDA_ARCHITECTURES}"
                                                   POSITION_INDEPENDENT_CODE ON)
    set_target_properties(chorus_device PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
    target_include_directories(chorus_device PUBLIC ${PROJECT_BINARY_DIR}/layers/device)
    target_link_libraries(chorus_device PUBLIC CUDA::cudart_static)
    set(CHORUS_CUDA_FOUND ON)
    message(STATUS "Chorus: CUDA ${CUDAToolkit_VERSION} found; device code for architectures ${CHORUS_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "Chorus: no CUDA toolkit found; building for host memory only")
  endif()
endif()
