#include "perf/common.h"

int main(int argc, char** argv) { return chorus::perf::runPerf(chorus::perf::allGatherVDesc(), argc, argv); }
