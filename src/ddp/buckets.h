// Gradient buckets of the data-parallel layer: which parameters are reduced together. A pure
// function of the parameters' sizes and types, so every rank computes the same buckets.
//
// As PyTorch's DDP (compute_bucket_assignment_by_size): parameters are taken in order and
// gathered per type (a bucket holds one type); a type's bucket closes once it holds at least its
// limit, and the limits are [firstBucketBytes, bucketCapBytes] in turn per type, so each type's
// first bucket is the small one. Open buckets are closed at the end, in the order their types
// first appeared (PyTorch uses hash order there; a fixed one keeps ranks in agreement).
#pragma once

#include <cstddef>
#include <vector>

#include "include/chorus/chorus.h"

namespace chorus::ddp {

struct ParamInfo {
  size_t count = 0;
  chorusDataType_t type = chorusFloat32;
};

struct Bucket {
  std::vector<size_t> params;  // indices into the parameter list, in the order they were added
  chorusDataType_t type = chorusFloat32;
  size_t bytes = 0;  // the parameters' bytes together
  size_t limit = 0;  // the limit it was filled against
};

// The buckets of the first iteration: parameters in definition order, buckets sorted by their
// smallest parameter index, then reversed, so the first bucket holds the parameters defined last
// (whose gradients come first in the backward pass) and the small first bucket comes last.
std::vector<Bucket> initialBuckets(const std::vector<ParamInfo>& params, size_t firstBucketBytes,
                                   size_t bucketCapBytes);

// The buckets after a rebuild: parameters in the order their gradients became ready (`ready`
// lists every parameter index once), buckets in that order, neither sorted nor reversed.
std::vector<Bucket> rebuiltBuckets(const std::vector<ParamInfo>& params, const std::vector<size_t>& ready,
                                   size_t firstBucketBytes, size_t bucketCapBytes);

}  // namespace chorus::ddp
