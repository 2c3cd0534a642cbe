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
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n1)
export PKG_CONFIG_PATH=$libdir
export LD_LIBRARY_PATH=$(dirname "$libdir")
gcc -std=c99 -pedantic -Wall -Werror "$src/examples/allreduce.c" $(pkg-config --cflags --libs chorus) \
  -o "$prefix/example_pc"
"$prefix/bin/chorusrun" -n 2 -- "$prefix/example_pc"
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
