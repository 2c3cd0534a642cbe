# CUDA: when the toolkit is found, the device path is built into libchorus.so: nvcc compiles the
# device code for CHORUS_CUDA_ARCHITECTURES in every build (named, since `native` fails without a
# GPU), and the CUDA runtime is linked statically. Nothing CUDA runs on a machine without a
# device; the device tests then skip and say so. Included before the layers are defined.
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
    set(CHORUS_CUDA_FOUND ON)
    message(STATUS "Chorus: CUDA ${CUDAToolkit_VERSION} found; device code for architectures ${CHORUS_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "Chorus: no CUDA toolkit found; building for host memory only")
  endif()
endif()

# chorus_cuda_objects(NAME SOURCES ...): an object library of .cu files with the device layer's
# include root, for libchorus.so (and chorus_internal).
function(chorus_cuda_objects name)
  add_library(${name} OBJECT ${ARGN})
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "${CHORUS_CUDA_ARCHITECTURES}" POSITION_INDEPENDENT_CODE ON
                                           CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
  target_include_directories(${name} PRIVATE ${PROJECT_BINARY_DIR}/layers/device)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off --fmad=false>)
endfunction()
