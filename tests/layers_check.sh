#!/usr/bin/env bash
# The build enforces the layers of docs/architecture.md: from each layer's include root, a header
# of any layer it may not use (above it, or beside it) must fail to preprocess, and a header of
# each layer it may use must preprocess.
#   layers_check.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
cxx=${CXX:-c++}
declare -A header=(
  [common]=src/common/status.h [kernels]=kernels/reduce_host.h [algo]=src/algo/schedule.h
  [bootstrap]=src/bootstrap/bootstrap.h [topo]=src/topo/topo.h [transport]=src/transport/transport.h
  [transports]=transports/net/socket_net.h
  [core]=src/core/comm.h [api]=src/api/streams.h [ddp]=src/ddp/reducer.h
  [device]=src/device/cuda.h)
# What each layer may use besides itself.
declare -A may=(
  [common]="" [kernels]="common" [algo]="common kernels" [bootstrap]="common kernels algo"
  [topo]="common kernels algo" [transport]="common kernels algo bootstrap device"
  [transports]="common kernels algo bootstrap topo transport device"
  [core]="common kernels algo bootstrap topo transport device"
  [api]="common kernels algo bootstrap topo transport device core"
  [ddp]="common kernels device" [device]="common kernels algo")
failures=0
checks=0
for layer in "${!may[@]}"; do
  root="$build/layers/$layer"
  [ -d "$root" ] || { echo "FAIL: no include root $root"; failures=$((failures + 1)); continue; }
  for other in "${!header[@]}"; do
    allowed=0
    [ "$other" = "$layer" ] && allowed=1
    for m in ${may[$layer]}; do [ "$m" = "$other" ] && allowed=1; done
    out=$(cd / && echo "#include \"${header[$other]}\"" | "$cxx" -std=c++20 -E -I "$root" -x c++ - -o /dev/null 2>&1)
    rc=$?
    checks=$((checks + 1))
    if [ $allowed -eq 1 ] && [ $rc -ne 0 ]; then
      echo "FAIL: $layer may use $other but cannot include ${header[$other]}: $(head -3 <<< "$out")"
      failures=$((failures + 1))
    elif [ $allowed -eq 0 ] && [ $rc -eq 0 ]; then
      echo "FAIL: $layer includes ${header[$other]} of $other, which it may not use"
      failures=$((failures + 1))
    fi
  done
done
echo "$checks layer pairs checked, $failures wrong"
[ $failures -eq 0 ]
