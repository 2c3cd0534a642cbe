# CUDA: when the toolkit is found, the device path is built into libchorus.so: nvcc compiles the
# device code for CHORUS_CUDA_ARCHITECTURES, and the CUDA runtime is linked statically. Nothing CUDA
# runs on a machine without a device; the device tests then skip and say so. Included before the
# layers are defined.
#
# The device code is the build's longest compile (the launch kernel with LL128 is several minutes
# of one core per architecture), so a build compiles what it will run: left empty,
# CHORUS_CUDA_ARCHITECTURES becomes the compute capabilities of the GPUs nvidia-smi lists here, or
# 90 (H100, H200) where it lists none. CMake's `native` would do the first but fails without a
# GPU. A library for other machines names them: -DCHORUS_CUDA_ARCHITECTURES="75;80;90" (SASS and
# PTX for each), or "90-virtual" for PTX alone (no ptxas: what a machine without a GPU needs to
# check that the device code compiles; the driver compiles it at first launch).

# chorus_local_cuda_architectures(OUT): the compute capabilities of this machine's GPUs ("90" for
# 9.0), each once, or 90 where nvidia-smi is missing or lists none.
function(chorus_local_cuda_architectures out)
  set(archs "")
  find_program(CHORUS_NVIDIA_SMI nvidia-smi)
  if(CHORUS_NVIDIA_SMI)
    execute_process(COMMAND ${CHORUS_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    if(rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(REPLACE "." "" arch "${cap}")
        list(APPEND archs ${arch})
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  if(archs)
    message(STATUS "Chorus: device code for this machine's GPUs (compute capability ${archs})")
  else()
    set(archs 90)
    message(STATUS "Chorus: no GPU listed by nvidia-smi; device code for sm_90 (H100, H200)")
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

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
    if(CHORUS_CUDA_ARCHITECTURES STREQUAL "")
      chorus_local_cuda_architectures(CHORUS_CUDA_ARCHITECTURES)
    endif()
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
  # --threads=0: a file's architectures compiled side by side, one per core.
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off --fmad=false --threads=0>)
endfunction()
