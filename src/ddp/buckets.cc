#include "src/ddp/buckets.h"

#include <algorithm>

#include "src/common/types.h"

namespace chorus::ddp {
namespace {

// Takes the parameters in `order` and fills buckets as described in buckets.h.
std::vector<Bucket> assign(const std::vector<ParamInfo>& params, const std::vector<size_t>& order,
                           size_t firstBucketBytes, size_t bucketCapBytes) {
  const size_t limits[2] = {firstBucketBytes, bucketCapBytes};
  struct Open {
    Bucket bucket;
    int limit = 0;  // index into `limits`
  };
  std::vector<Open> open;  // one per type, in the order the types first appeared
  std::vector<Bucket> out;
  for (size_t index : order) {
    const ParamInfo& p = params[index];
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) { return o.bucket.type == p.type; });
    if (it == open.end()) {
      open.push_back(Open{});
      it = open.end() - 1;
      it->bucket.type = p.type;
    }
    Bucket& b = it->bucket;
    b.params.push_back(index);
    b.bytes += p.count * typeSize(p.type);
    b.limit = limits[it->limit];
    if (b.bytes >= b.limit) {
      out.push_back(std::move(b));
      b = Bucket{};
      b.type = p.type;
      it->limit = 1;  // every bucket after a type's first one is capped at bucketCapBytes
    }
  }
  for (Open& o : open) {
    if (!o.bucket.params.empty()) out.push_back(std::move(o.bucket));
  }
  return out;
}

}  // namespace

std::vector<Bucket> initialBuckets(const std::vector<ParamInfo>& params, size_t firstBucketBytes,
                                   size_t bucketCapBytes) {
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<Bucket> out = assign(params, order, firstBucketBytes, bucketCapBytes);
  std::stable_sort(out.begin(), out.end(), [](const Bucket& a, const Bucket& b) {
    return *std::min_element(a.params.begin(), a.params.end()) < *std::min_element(b.params.begin(), b.params.end());
  });
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Bucket> rebuiltBuckets(const std::vector<ParamInfo>& params, const std::vector<size_t>& ready,
                                   size_t firstBucketBytes, size_t bucketCapBytes) {
  return assign(params, ready, firstBucketBytes, bucketCapBytes);
}

}  // namespace chorus::ddp
