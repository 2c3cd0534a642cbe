#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds the C example against it two ways (gcc
# -std=c99 with pkg-config, and CMake's find_package(Chorus)) and runs both under chorusrun, and
# builds a C++17 program on the DDP wrapper (chorus/ddp.hpp).
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
export PKG_CONFIG_PATH=$(ls -d "$prefix"/lib*/pkgconfig | head -n1)
libdir=$(pkg-config --variable=libdir chorus)
# The installed programs find the library without LD_LIBRARY_PATH (their rpath is ../lib).
"$prefix/bin/all_reduce_perf" -t 2 -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 > "$prefix/perf.out" ||
  { cat "$prefix/perf.out"; exit 1; }
for tool in all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv gather scatter; do
  [ -x "$prefix/bin/${tool}_perf" ] || { echo "${tool}_perf is not installed" >&2; exit 1; }
done
"$prefix/bin/chorus-topo" --help > /dev/null
# A program linked with pkg-config alone needs the library's directory at run time: the rpath
# the README gives, or LD_LIBRARY_PATH.
gcc -std=c99 -pedantic -Wall -Werror "$src/examples/allreduce.c" $(pkg-config --cflags --libs chorus) \
  -Wl,-rpath,"$libdir" -o "$prefix/example_pc"
"$prefix/bin/chorusrun" -n 2 -- "$prefix/example_pc"
export LD_LIBRARY_PATH=$libdir
cmake -S "$src/tests/install" -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLE_SOURCE="$src/examples/allreduce.c" > /dev/null
cmake --build "$prefix/consumer" > /dev/null
"$prefix/bin/chorusrun" -n 3 -- "$prefix/consumer/consumer"
# The DDP headers from the prefix: C++17 is enough for the wrapper.
cat > "$prefix/ddp.cc" <<'CC'
#include <chorus/ddp.hpp>
#include <cstdio>
int main() {
  try {
    chorus::DdpReducer r(nullptr, {});
  } catch (const chorus::Error& e) {
    std::printf("refused as expected: %s\n", e.what());
    return e.code() == chorusInvalidArgument ? 0 : 1;
  }
  return 1;
}
CC
g++ -std=c++17 -Wall -Werror "$prefix/ddp.cc" $(pkg-config --cflags --libs chorus) -o "$prefix/ddp_pc"
"$prefix/ddp_pc"
# Only the C API leaves the library.
if nm -D --defined-only "$LD_LIBRARY_PATH/libchorus.so" | awk '{print $3}' | grep -v '^chorus' | grep -q .; then
  echo "libchorus.so exports symbols outside the C API:" >&2
  nm -D --defined-only "$LD_LIBRARY_PATH/libchorus.so" | awk '{print $3}' | grep -v '^chorus' >&2
  exit 1
fi
echo "install test passed"
