// Data-parallel training of a small MLP on Fashion-MNIST, with every gradient exchange going
// through the DDP layer (chorus/ddp.hpp).
//
// Each rank reads the data set (Debian's dataset-fashion-mnist, MNIST's gzipped idx files), takes
// its shard as PyTorch's DistributedSampler does (one permutation per epoch from a shared seed,
// padded to a multiple of the ranks, rank r taking every n-th index from r), runs forward and
// backward by hand, writes each gradient where the reducer says and marks it ready as soon as it
// is complete, so buckets are reduced while the layers below are still being differentiated. SGD
// with momentum, as torch.optim.SGD.
//
//   chorusrun -n 2 -- ddp_mnist --epochs 1
//   mpirun -np 4 ddp_mnist --steps 200        (one host; across hosts add -x CHORUS_COMM_ID=host:port)
//
// --device cuda trains on a GPU (a CUDA build; --gpu picks it, default the rank's local index modulo
// the GPUs): forward, loss, backward and SGD as kernels of its own (ddp_mnist_gpu.cu) on one CUDA
// stream, gradients in the reducer's device buckets marked with chorusDdpMarkReadyOn as each
// layer's gradient kernel is enqueued, and chorusDdpFinalizeOn before the SGD kernels: the host
// never waits for the GPU within a step (except to print the loss).
//
// Checks for the tests: --check-sync (all ranks hold the same weights, bit for bit, after every
// step), --emulate-ranks N (one rank trains on the union of N ranks' batches), --dump/--compare
// (final weights against another run's), --save-at/--save and --resume (checkpoints),
// --min-accuracy. --bench times steps with the buckets as configured.
//
// --survive: when ranks are lost, the survivors shrink the communicator without the rank the error
// names (chorusCommShrink), build the reducer again on the new one, agree on the last step every
// survivor completed (one may be a step ahead: it rolls back), make the weights and momentum
// rank 0's, hand the rest of the epoch to the survivors and go on. --kill-rank R --kill-at S:
// rank R kills itself (SIGKILL) as step S begins, to try it; run under `chorusrun --keep-going`
// or tests/multihost/netns_run.sh, which let the others go on.
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "chorus/chorus_cuda.h"
#include "chorus/ddp.hpp"
#include "ddp_mnist_gpu.h"

namespace {

using Clock = std::chrono::steady_clock;

// ---- data ----

struct DataSet {
  int n = 0;
  std::vector<float> images;  // n x 784, normalised
  std::vector<uint8_t> labels;
};

uint32_t bigEndian(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::vector<uint8_t> readGz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path + " (install dataset-fashion-mnist, or pass --data)");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + got);
  const bool bad = got < 0;
  gzclose(f);
  if (bad) throw std::runtime_error(path + " is not a readable gzip file");
  return out;
}

// idx format: magic (0x0803 images, 0x0801 labels), dimensions, then the bytes.
DataSet loadSplit(const std::string& dir, const std::string& prefix) {
  const std::vector<uint8_t> img = readGz(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  const std::vector<uint8_t> lab = readGz(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  if (img.size() < 16 || bigEndian(img.data()) != 0x803 || lab.size() < 8 || bigEndian(lab.data()) != 0x801) {
    throw std::runtime_error(dir + ": " + prefix + " files are not idx images and labels");
  }
  DataSet d;
  d.n = static_cast<int>(bigEndian(img.data() + 4));
  const uint32_t rows = bigEndian(img.data() + 8), cols = bigEndian(img.data() + 12);
  if (rows * cols != 784 || bigEndian(lab.data() + 4) != uint32_t(d.n) || img.size() != 16 + size_t(d.n) * 784 ||
      lab.size() != 8 + size_t(d.n)) {
    throw std::runtime_error(dir + ": " + prefix + " files have unexpected sizes");
  }
  // Fashion-MNIST's mean and standard deviation of the training pixels.
  const float mean = 0.2860f, stdev = 0.3530f;
  d.images.resize(size_t(d.n) * 784);
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = (img[16 + i] / 255.0f - mean) / stdev;
  d.labels.assign(lab.begin() + 8, lab.end());
  return d;
}

// DistributedSampler: a permutation of the whole set per epoch (seed + epoch), padded by wrapping
// to a multiple of the ranks; rank r's shard is every n-th entry from r. Batches drop the last
// partial one. After ranks are lost (--survive), repartition() hands what is left of the epoch
// to the survivors, each taking every n'-th of the samples not yet taken (what does not fill a
// step of all of them is dropped), and the epochs after it to them as a whole.
class Sampler {
 public:
  Sampler(int size, int nranks, int batch, uint64_t seed) : size_(size), batch_(batch), seed_(seed) {
    if (perEpoch(nranks) == 0) throw std::runtime_error("the batch is larger than a rank's shard");
    parts_.push_back({0, 0, 0, nranks});
  }
  int stepsPerEpoch() const { return perEpoch(parts_.back().nranks); }
  int64_t epochOf(int64_t step) const { return position(step).epoch; }
  // From global step `step` on, `nranks` ranks share the rest of that step's epoch.
  void repartition(int64_t step, int nranks) {
    const Position p = position(step);
    while (parts_.size() > 1 && parts_.back().firstStep >= step) parts_.pop_back();
    parts_.push_back({step, p.epoch, p.offset, nranks});
  }
  // The global step at which `epochs` epochs (a fraction counts the samples of the last) are done.
  int64_t stepsFor(double epochs) const {
    const Part& q = parts_.back();
    const int64_t whole = static_cast<int64_t>(epochs);
    const int64_t want = static_cast<int64_t>(std::ceil((epochs - double(whole)) * size_));  // samples into it
    const int64_t perStep = int64_t(batch_) * q.nranks;
    if (whole == q.epoch) {
      return q.firstStep +
             std::clamp<int64_t>((want - q.offset + perStep - 1) / perStep, 0, stepsLeft(q.offset, q.nranks));
    }
    const int64_t start = q.firstStep + stepsLeft(q.offset, q.nranks) + (whole - q.epoch - 1) * perEpoch(q.nranks);
    return whole < q.epoch ? q.firstStep : start + (want + perStep - 1) / perStep;
  }
  // The sample indices of rank r's batch at global step s.
  std::vector<int> batch(int64_t step, int r) {
    const Position p = position(step);
    if (p.epoch != epoch_) {
      perm_.resize(size_);
      for (int i = 0; i < size_; ++i) perm_[i] = i;
      std::mt19937_64 rng(seed_ + static_cast<uint64_t>(p.epoch));
      for (int i = size_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng() % uint64_t(i + 1)]);
      epoch_ = p.epoch;
    }
    std::vector<int> out(batch_);
    for (int j = 0; j < batch_; ++j) out[j] = perm_[(p.offset + int64_t(j) * p.nranks + r) % size_];
    return out;
  }

 private:
  struct Part {  // from firstStep on, nranks ranks, starting at sample `offset` of epoch `epoch`
    int64_t firstStep, epoch, offset;
    int nranks;
  };
  struct Position {
    int64_t epoch, offset;  // the step's first sample in its epoch's permutation
    int nranks;
  };
  int perEpoch(int n) const { return ((size_ + n - 1) / n) / batch_; }
  // Steps in an epoch from sample `offset` on: a whole epoch from 0 (DistributedSampler's padding).
  int64_t stepsLeft(int64_t offset, int n) const {
    return offset == 0 ? perEpoch(n) : std::max<int64_t>(0, (size_ - offset) / (int64_t(batch_) * n));
  }
  Position position(int64_t step) const {
    const Part* q = &parts_.front();
    for (const Part& p : parts_) {
      if (p.firstStep <= step) q = &p;
    }
    int64_t local = step - q->firstStep;
    int64_t epoch = q->epoch;
    int64_t offset = q->offset;
    const int64_t left = stepsLeft(offset, q->nranks);
    if (local >= left) {
      local -= left;
      epoch += 1 + local / perEpoch(q->nranks);
      local %= perEpoch(q->nranks);
      offset = 0;
    }
    return {epoch, offset + local * batch_ * q->nranks, q->nranks};
  }
  int size_, batch_;
  uint64_t seed_;
  std::vector<Part> parts_;
  int64_t epoch_ = -1;
  std::vector<int> perm_;
};

// ---- model ----

struct Mlp {
  std::vector<int> sizes;               // 784, hidden..., 10
  std::vector<std::vector<float>> w;    // per parameter: fc0.weight, fc0.bias, fc1.weight, ...
  std::vector<std::vector<float>> mom;  // momentum buffers
  std::vector<std::string> names;

  explicit Mlp(std::vector<int> s) : sizes(std::move(s)) {
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      w.emplace_back(size_t(sizes[l + 1]) * sizes[l]);
      w.emplace_back(sizes[l + 1]);
      names.push_back("fc" + std::to_string(l) + ".weight");
      names.push_back("fc" + std::to_string(l) + ".bias");
    }
    for (auto& p : w) mom.emplace_back(p.size(), 0.0f);
  }
  int layers() const { return static_cast<int>(sizes.size()) - 1; }
  // torch.nn.Linear's default: weights and biases uniform in +-1/sqrt(fan_in).
  void init(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int l = 0; l < layers(); ++l) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(sizes[l]));
      std::uniform_real_distribution<float> u(-bound, bound);
      for (float& x : w[2 * l]) x = u(rng);
      for (float& x : w[2 * l + 1]) x = u(rng);
    }
  }
  size_t parameters() const {
    size_t n = 0;
    for (auto& p : w) n += p.size();
    return n;
  }
};

// Activations of one batch: a[0] the input, a[l] after layer l (ReLU except the last: logits).
struct Activations {
  std::vector<std::vector<float>> a;
};

void forward(const Mlp& m, const float* x, int batch, Activations& act) {
  act.a.resize(m.layers() + 1);
  act.a[0].assign(x, x + size_t(batch) * 784);
  for (int l = 0; l < m.layers(); ++l) {
    const int in = m.sizes[l], out = m.sizes[l + 1];
    const float* W = m.w[2 * l].data();
    const float* b = m.w[2 * l + 1].data();
    std::vector<float>& z = act.a[l + 1];
    z.assign(size_t(batch) * out, 0.0f);
    const bool relu = l + 1 < m.layers();
    for (int s = 0; s < batch; ++s) {
      const float* ain = &act.a[l][size_t(s) * in];
      for (int o = 0; o < out; ++o) {
        const float* row = W + size_t(o) * in;
        float acc = 0.0f;
        for (int i = 0; i < in; ++i) acc += row[i] * ain[i];
        acc += b[o];
        z[size_t(s) * out + o] = relu && acc < 0.0f ? 0.0f : acc;
      }
    }
  }
}

// Mean cross-entropy over the batch, and d(loss)/d(logits) for a loss averaged over `denominator`
// samples.
double lossAndGrad(const std::vector<float>& logits, const uint8_t* labels, int batch, int denominator,
                   std::vector<float>& dz) {
  dz.assign(logits.size(), 0.0f);
  double loss = 0;
  for (int s = 0; s < batch; ++s) {
    const float* z = &logits[size_t(s) * 10];
    float mx = z[0];
    for (int k = 1; k < 10; ++k) mx = std::max(mx, z[k]);
    double sum = 0;
    for (int k = 0; k < 10; ++k) sum += std::exp(double(z[k] - mx));
    loss += std::log(sum) - (z[labels[s]] - mx);
    for (int k = 0; k < 10; ++k) {
      const double p = std::exp(double(z[k] - mx)) / sum;
      dz[size_t(s) * 10 + k] = static_cast<float>((p - (k == labels[s] ? 1.0 : 0.0)) / denominator);
    }
  }
  return loss / batch;
}

// Backward from d(loss)/d(logits): each layer's weight and bias gradients go into the reducer's
// storage and are marked ready at once, before the layer below is differentiated.
void backward(const Mlp& m, const Activations& act, std::vector<float> dz, int batch, chorus::DdpReducer& ddp) {
  std::vector<float> da;
  for (int l = m.layers() - 1; l >= 0; --l) {
    const int in = m.sizes[l], out = m.sizes[l + 1];
    float* dW = ddp.gradient<float>(2 * l);
    float* db = ddp.gradient<float>(2 * l + 1);
    std::fill(dW, dW + size_t(out) * in, 0.0f);
    std::fill(db, db + out, 0.0f);
    for (int o = 0; o < out; ++o) {
      float* row = dW + size_t(o) * in;
      for (int s = 0; s < batch; ++s) {
        const float g = dz[size_t(s) * out + o];
        if (g == 0.0f) continue;
        const float* ain = &act.a[l][size_t(s) * in];
        for (int i = 0; i < in; ++i) row[i] += g * ain[i];
        db[o] += g;
      }
    }
    ddp.markReady(2 * l);
    ddp.markReady(2 * l + 1);
    if (l == 0) break;
    // d(loss)/d(input of this layer), through the ReLU of the layer below.
    const float* W = m.w[2 * l].data();
    da.assign(size_t(batch) * in, 0.0f);
    for (int s = 0; s < batch; ++s) {
      float* d = &da[size_t(s) * in];
      for (int o = 0; o < out; ++o) {
        const float g = dz[size_t(s) * out + o];
        if (g == 0.0f) continue;
        const float* row = W + size_t(o) * in;
        for (int i = 0; i < in; ++i) d[i] += g * row[i];
      }
      const float* a = &act.a[l][size_t(s) * in];
      for (int i = 0; i < in; ++i) {
        if (a[i] <= 0.0f) d[i] = 0.0f;
      }
    }
    dz.swap(da);
  }
}

// torch.optim.SGD with momentum (no dampening, no weight decay).
void sgdStep(Mlp& m, chorus::DdpReducer& ddp, float lr, float momentum) {
  for (size_t p = 0; p < m.w.size(); ++p) {
    const float* g = ddp.gradient<float>(static_cast<int>(p));
    float* w = m.w[p].data();
    float* v = m.mom[p].data();
    for (size_t i = 0; i < m.w[p].size(); ++i) {
      v[i] = momentum * v[i] + g[i];
      w[i] -= lr * v[i];
    }
  }
}

double accuracy(const Mlp& m, const DataSet& test) {
  Activations act;
  int correct = 0;
  const int chunk = 500;
  for (int s0 = 0; s0 < test.n; s0 += chunk) {
    const int b = std::min(chunk, test.n - s0);
    forward(m, &test.images[size_t(s0) * 784], b, act);
    for (int s = 0; s < b; ++s) {
      const float* z = &act.a.back()[size_t(s) * 10];
      correct += (std::max_element(z, z + 10) - z) == test.labels[s0 + s];
    }
  }
  return double(correct) / test.n;
}

// ---- checkpoints: step, weights, momentum ----

constexpr char kMagic[8] = {'C', 'H', 'D', 'D', 'P', 'C', 'K', '1'};

void save(const std::string& path, const Mlp& m, int64_t step) {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary);
  f.write(kMagic, 8);
  f.write(reinterpret_cast<const char*>(&step), 8);
  for (const auto* set : {&m.w, &m.mom}) {
    for (const auto& p : *set) f.write(reinterpret_cast<const char*>(p.data()), std::streamsize(p.size() * 4));
  }
  f.close();
  if (!f || std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

int64_t load(const std::string& path, Mlp& m) {
  std::ifstream f(path, std::ios::binary);
  char magic[8];
  int64_t step = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&step), 8);
  if (!f || std::memcmp(magic, kMagic, 8) != 0) throw std::runtime_error(path + " is not a checkpoint of this program");
  for (auto* set : {&m.w, &m.mom}) {
    for (auto& p : *set) f.read(reinterpret_cast<char*>(p.data()), std::streamsize(p.size() * 4));
  }
  if (!f || f.peek() != EOF) throw std::runtime_error(path + " does not match this model (--hidden)");
  return step;
}

uint64_t hashWeights(const Mlp& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : m.w) {
    const auto* c = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t i = 0; i < p.size() * 4; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  return h;
}

// ---- the model on a GPU (--device cuda) ----

// The weights, momentum and activations of one rank on its GPU, and the CUDA stream every step
// runs on. Gradients live in the reducer's buckets.
class GpuTrainer {
 public:
  GpuTrainer(const Mlp& m, int maxRows) : sizes_(m.sizes) {
    stream_ = mnist_gpu::streamCreate();
    chorus::check(chorusStreamFromCuda(static_cast<struct CUstream_st*>(stream_), &wrapped_));
    for (size_t p = 0; p < m.w.size(); ++p) {
      w_.push_back(static_cast<float*>(mnist_gpu::alloc(m.w[p].size() * 4)));
      mom_.push_back(static_cast<float*>(mnist_gpu::alloc(m.w[p].size() * 4)));
      n_.push_back(m.w[p].size());
    }
    for (int size : sizes_) a_.push_back(static_cast<float*>(mnist_gpu::alloc(size_t(maxRows) * size * 4)));
    dz_[0] = static_cast<float*>(mnist_gpu::alloc(size_t(maxRows) * maxWidth() * 4));
    dz_[1] = static_cast<float*>(mnist_gpu::alloc(size_t(maxRows) * maxWidth() * 4));
    labels_ = static_cast<uint8_t*>(mnist_gpu::alloc(maxRows));
    loss_ = static_cast<double*>(mnist_gpu::alloc(size_t(maxRows) * 8));
    upload(m);
  }
  ~GpuTrainer() {
    mnist_gpu::synchronize(stream_);
    for (auto* v : {&w_, &mom_, &a_}) {
      for (float* p : *v) mnist_gpu::release(p);
    }
    mnist_gpu::release(dz_[0]);
    mnist_gpu::release(dz_[1]);
    mnist_gpu::release(labels_);
    mnist_gpu::release(loss_);
    (void)chorusStreamDestroy(wrapped_);
    mnist_gpu::streamDestroy(stream_);
  }
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  std::vector<void*> params() const { return {w_.begin(), w_.end()}; }
  void upload(const Mlp& m) {
    for (size_t p = 0; p < w_.size(); ++p) {
      mnist_gpu::toDevice(w_[p], m.w[p].data(), n_[p] * 4, stream_);
      mnist_gpu::toDevice(mom_[p], m.mom[p].data(), n_[p] * 4, stream_);
    }
    mnist_gpu::synchronize(stream_);
  }
  void download(Mlp& m) {
    for (size_t p = 0; p < w_.size(); ++p) {
      mnist_gpu::toHost(m.w[p].data(), w_[p], n_[p] * 4, stream_);
      mnist_gpu::toHost(m.mom[p].data(), mom_[p], n_[p] * 4, stream_);
    }
  }

  // One step on `rows` samples: the host trainer's forward, lossAndGrad, backward and sgdStep.
  void step(const float* x, const uint8_t* y, int rows, chorus::DdpReducer& ddp, float lr, float momentum) {
    mnist_gpu::toDevice(a_[0], x, size_t(rows) * 784 * 4, stream_);
    mnist_gpu::toDevice(labels_, y, rows, stream_);
    const int layers = static_cast<int>(sizes_.size()) - 1;
    ddp.prepareForBackward();
    for (int l = 0; l < layers; ++l) {
      mnist_gpu::forwardLayer(w_[2 * l], w_[2 * l + 1], a_[l], a_[l + 1], rows, sizes_[l], sizes_[l + 1],
                              l + 1 == layers, stream_);
    }
    int cur = 0;
    mnist_gpu::lossGrad(a_[layers], labels_, rows, rows, dz_[cur], loss_, stream_);
    for (int l = layers - 1; l >= 0; --l) {
      mnist_gpu::weightGrad(dz_[cur], a_[l], ddp.gradient<float>(2 * l), ddp.gradient<float>(2 * l + 1), rows,
                            sizes_[l], sizes_[l + 1], stream_);
      ddp.markReadyOn(2 * l, wrapped_);
      ddp.markReadyOn(2 * l + 1, wrapped_);
      if (l == 0) break;
      mnist_gpu::inputGrad(dz_[cur], w_[2 * l], a_[l], dz_[1 - cur], rows, sizes_[l], sizes_[l + 1], stream_);
      cur = 1 - cur;
    }
    ddp.finalizeOn(wrapped_);
    for (size_t p = 0; p < w_.size(); ++p) {
      mnist_gpu::sgd(w_[p], mom_[p], ddp.gradient<float>(static_cast<int>(p)), n_[p], lr, momentum, stream_);
    }
    rows_ = rows;
  }
  // The last step's mean loss (waits for the GPU).
  double loss() {
    std::vector<double> l(rows_);
    mnist_gpu::toHost(l.data(), loss_, size_t(rows_) * 8, stream_);
    double sum = 0;
    for (double v : l) sum += v;
    return sum / rows_;
  }
  void synchronize() { mnist_gpu::synchronize(stream_); }

 private:
  int maxWidth() const { return *std::max_element(sizes_.begin(), sizes_.end()); }
  std::vector<int> sizes_;
  void* stream_ = nullptr;
  chorusStream_t wrapped_ = nullptr;
  std::vector<float*> w_, mom_, a_;
  std::vector<size_t> n_;
  float* dz_[2] = {nullptr, nullptr};
  uint8_t* labels_ = nullptr;
  double* loss_ = nullptr;
  int rows_ = 0;
};

void barrier(chorusComm_t comm) {
  int one = 1;
  chorus::check(chorusAllReduce(&one, &one, 1, chorusInt32, chorusSum, comm, nullptr));
}

std::vector<int> parseSizes(const std::string& s) {
  std::vector<int> out{784};
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoi(s.substr(at, end - at)));
    at = end + 1;
  }
  out.push_back(10);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Data-parallel MLP training on Fashion-MNIST through the Chorus DDP layer");
  std::string data = "/usr/share/datasets/fashion-mnist", hidden = "256,128", buckets = "bucketed", hook = "none";
  std::string dump, compare, savePath, resume, deviceKind = "host";
  int batch = 32, emulate = 0, logEvery = 100, benchWarmup = 5, gpu = -1;
  int64_t steps = 0, saveAt = -1;
  double epochs = 0, minAccuracy = -1, rtol = 1e-5;
  float lr = 0.05f, momentum = 0.9f;
  uint64_t seed = 1234;
  double bucketCapMb = 25, firstBucketMb = 1;
  bool checkSync = false, eval = true, bench = false, survive = false;
  int killRank = -1;
  int64_t killAt = -1;
  app.add_option("--data", data, "directory of the gzipped idx files");
  app.add_option("--device", deviceKind, "host, or cuda: train on a GPU with device gradients")
      ->check(CLI::IsMember({"host", "cuda"}));
  app.add_option("--gpu", gpu, "--device cuda: the GPU (default: the rank's local index modulo the GPUs)");
  app.add_option("--batch", batch, "samples per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "steps to train (default: --epochs, or one epoch)");
  app.add_option("--epochs", epochs, "epochs to train");
  app.add_option("--hidden", hidden, "hidden layer sizes, comma separated");
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--momentum", momentum, "SGD momentum");
  app.add_option("--seed", seed, "seed of the shuffles and of rank 0's initial weights");
  app.add_option("--buckets", buckets,
                 "bucketed (the caps below), single (one all-reduce after the backward), per-param")
      ->check(CLI::IsMember({"bucketed", "single", "per-param"}));
  app.add_option("--bucket-cap-mb", bucketCapMb, "bucket cap, MiB");
  app.add_option("--first-bucket-mb", firstBucketMb, "first bucket cap, MiB");
  app.add_option("--hook", hook, "none, fp16 or bf16 compression")->check(CLI::IsMember({"none", "fp16", "bf16"}));
  app.add_option("--emulate-ranks", emulate, "on one rank: train on the union of this many ranks' batches");
  app.add_flag("--check-sync", checkSync, "after every step, check that all ranks hold the same weights, bit for bit");
  app.add_option("--dump", dump, "rank 0 writes the final weights here (raw float32)");
  app.add_option("--compare", compare, "rank 0 compares the final weights with a --dump file");
  app.add_option("--rtol", rtol, "--compare: |a - b| <= rtol * |b| + 1e-8 (numpy's allclose)");
  app.add_option("--save", savePath, "checkpoint file");
  app.add_option("--save-at", saveAt, "after this step: rank 0 saves, all wait, all load and go on");
  app.add_option("--resume", resume, "start from this checkpoint");
  app.add_option("--min-accuracy", minAccuracy, "fail unless the test accuracy reaches this");
  app.add_flag("!--no-eval", eval, "skip the test-set accuracy");
  app.add_flag("--bench", bench, "time the steps after --bench-warmup and print the median");
  app.add_option("--bench-warmup", benchWarmup, "steps not timed");
  app.add_flag("--survive", survive,
               "when ranks are lost, shrink the communicator, rebuild the reducer and go on (host only)");
  app.add_option("--kill-rank", killRank, "with --kill-at: this rank kills itself (SIGKILL)");
  app.add_option("--kill-at", killAt, "the step at whose start --kill-rank dies");
  app.add_option("--log-every", logEvery, "print the loss every this many steps (0: never)");
  CLI11_PARSE(app, argc, argv);

  try {
    // On a GPU, its device is current before the communicator is made, so the communicator's
    // device (and with it the reducer's gradient memory) is that GPU.
    const bool onGpu = deviceKind == "cuda";
    if (onGpu) {
      const int gpus = mnist_gpu::built() ? mnist_gpu::deviceCount() : 0;
      if (mnist_gpu::built() && gpus == 0) throw std::runtime_error("--device cuda: no CUDA device on this machine");
      const char* local = std::getenv("CHORUS_LOCAL_RANK");
      mnist_gpu::setDevice(gpu >= 0 ? gpu : (local ? std::atoi(local) : 0) % std::max(gpus, 1));
    }
    // Under a launcher, its ranks; started alone, one rank.
    chorusComm_t comm = nullptr;
    chorus::check(chorusCommInitFromEnv(&comm, nullptr));
    int rank = 0, nranks = 1;
    chorus::check(chorusCommUserRank(comm, &rank));
    chorus::check(chorusCommCount(comm, &nranks));
    if (emulate > 0 && nranks != 1) throw std::runtime_error("--emulate-ranks runs on one rank");
    if (survive && (onGpu || emulate > 0)) throw std::runtime_error("--survive trains on the host, one rank each");
    const int shards = emulate > 0 ? emulate : nranks;  // the sampler's ranks

    const DataSet train = loadSplit(data, "train");
    Mlp model(parseSizes(hidden));
    // Every rank starts from different weights; the broadcast below makes them rank 0's.
    model.init(seed + 7919 * rank);

    std::vector<chorusDdpParam_t> params;
    for (size_t p = 0; p < model.w.size(); ++p)
      params.push_back({model.w[p].size(), chorusFloat32, model.names[p].c_str()});
    chorusDdpConfig_t cfg = CHORUS_DDP_CONFIG_INITIALIZER;
    if (buckets == "single") {
      cfg.bucketCapBytes = cfg.firstBucketCapBytes = SIZE_MAX - 1;
    } else if (buckets == "per-param") {
      cfg.bucketCapBytes = cfg.firstBucketCapBytes = 0;
    } else {
      cfg.bucketCapBytes = static_cast<size_t>(bucketCapMb * 1048576);
      cfg.firstBucketCapBytes = static_cast<size_t>(firstBucketMb * 1048576);
    }
    cfg.hook = hook == "fp16" ? chorusDdpHookFp16 : hook == "bf16" ? chorusDdpHookBf16 : chorusDdpHookAllReduce;
    cfg.gradientMemory = onGpu ? chorusDdpMemoryDevice : chorusDdpMemoryHost;
    chorus::DdpReducer ddp(comm, params, &cfg);

    const int rows = batch * (emulate > 0 ? emulate : 1);
    std::unique_ptr<GpuTrainer> gpuTrainer;
    if (onGpu) gpuTrainer = std::make_unique<GpuTrainer>(model, rows);
    std::vector<void*> ptrs;
    for (auto& p : model.w) ptrs.push_back(p.data());
    ddp.broadcastParameters(onGpu ? gpuTrainer->params() : ptrs, 0);
    int64_t step = 0;
    if (!resume.empty()) {
      step = load(resume, model);
      if (onGpu) gpuTrainer->upload(model);
    }

    Sampler sampler(train.n, shards, batch, seed);
    const bool byEpochs = steps == 0;
    if (byEpochs) steps = static_cast<int64_t>(std::llround((epochs > 0 ? epochs : 1.0) * sampler.stepsPerEpoch()));
    // --survive: the weights and momentum before this step's update, for a survivor a step ahead.
    std::vector<std::vector<float>> prevW, prevMom;
    // After ranks are lost: the survivors' communicator and reducer, from the last step they all
    // completed (`done` here: this rank's completed steps). Returns that step.
    auto goOn = [&](const chorus::Error& e, int64_t done) -> int64_t {
      std::smatch m;
      const std::string why = e.what();
      if (!std::regex_search(why, m, std::regex("rank ([0-9]+) \\(host "))) throw e;
      const int lost = std::stoi(m[1]);
      std::printf("rank %d: lost rank %d in step %lld: %s\n", rank, lost, static_cast<long long>(done), why.c_str());
      std::fflush(stdout);
      int exclude[1] = {lost};
      chorusComm_t survivors = nullptr;
      chorus::check(chorusCommShrink(comm, exclude, 1, &survivors, nullptr, CHORUS_SHRINK_DEFAULT));
      ddp = chorus::DdpReducer(survivors, params, &cfg);  // the old one goes with its communicator's failure
      chorusCommAbort(comm);
      comm = survivors;
      const int before = nranks;
      chorus::check(chorusCommUserRank(comm, &rank));
      chorus::check(chorusCommCount(comm, &nranks));
      int64_t agreed = done;
      chorus::check(chorusAllReduce(&done, &agreed, 1, chorusInt64, chorusMin, comm, nullptr));
      if (done == agreed + 1) {
        model.w = prevW;
        model.mom = prevMom;
      } else if (done != agreed) {
        throw std::runtime_error("survivors are more than a step apart");
      }
      std::vector<void*> now;
      for (auto& p : model.w) now.push_back(p.data());
      ddp.broadcastParameters(now, 0);
      for (auto& p : model.mom) {
        chorus::check(chorusBroadcast(p.data(), p.data(), p.size(), chorusFloat32, 0, comm, nullptr));
      }
      sampler.repartition(agreed, nranks);
      if (byEpochs) steps = sampler.stepsFor(epochs > 0 ? epochs : 1.0);
      if (rank == 0) {
        std::printf(
            "lost rank %d in step %lld: %d of %d ranks go on from step %lld (%lld step(s) redone), to step %lld\n",
            lost, static_cast<long long>(agreed), nranks, before, static_cast<long long>(agreed),
            static_cast<long long>(done - agreed), static_cast<long long>(steps));
        std::fflush(stdout);
      }
      return agreed;
    };
    std::vector<float> x(size_t(rows) * 784);
    std::vector<uint8_t> y(rows);
    Activations act;
    std::vector<float> dz;
    std::vector<double> stepMs;
    double commBefore = 0, exposedBefore = 0;
    int64_t checkedSteps = 0;
    const auto t0 = Clock::now();
    if (rank == 0) {
      std::printf("training %zu parameters (%s) on %d rank(s)%s, batch %d per rank, %lld steps from step %lld\n",
                  model.parameters(), hidden.c_str(), nranks, onGpu ? " on GPUs" : "", batch,
                  static_cast<long long>(steps), static_cast<long long>(step));
    }
    for (; step < steps; ++step) {
      if (step == killAt && rank == killRank) {
        std::printf("rank %d: killing itself as step %lld begins (--kill-rank, --kill-at)\n", rank,
                    static_cast<long long>(step));
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      if (survive) {
        prevW = model.w;
        prevMom = model.mom;
      }
      bool updated = false;  // this step's update is in the weights
      try {
        if (bench && step == benchWarmup) {
          barrier(comm);
          const chorusDdpStats_t s = ddp.stats();
          commBefore = s.totalCommSeconds;
          exposedBefore = s.totalExposedSeconds;
        }
        const auto ts = Clock::now();
        // This rank's batch, or the union of the emulated ranks' batches in rank order.
        for (int r = 0; r < (emulate > 0 ? emulate : 1); ++r) {
          const std::vector<int> idx = sampler.batch(step, emulate > 0 ? r : rank);
          for (int j = 0; j < batch; ++j) {
            std::memcpy(&x[(size_t(r) * batch + j) * 784], &train.images[size_t(idx[j]) * 784], 784 * sizeof(float));
            y[r * batch + j] = train.labels[idx[j]];
          }
        }
        const bool logNow = rank == 0 && logEvery > 0 && (step + 1) % logEvery == 0;
        double loss = 0;
        if (onGpu) {
          gpuTrainer->step(x.data(), y.data(), rows, ddp, lr, momentum);
          if (logNow) loss = gpuTrainer->loss();
          if (bench || checkSync || step + 1 == saveAt) gpuTrainer->synchronize();
          if (checkSync || step + 1 == saveAt) gpuTrainer->download(model);
        } else {
          ddp.prepareForBackward();
          forward(model, x.data(), rows, act);
          loss = lossAndGrad(act.a.back(), y.data(), rows, rows, dz);
          backward(model, act, dz, rows, ddp);
          ddp.finalize();
          sgdStep(model, ddp, lr, momentum);
          updated = true;
        }
        if (bench && step >= benchWarmup) {
          stepMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - ts).count());
        }
        if (checkSync) {
          std::vector<uint64_t> all(nranks);
          const uint64_t mine = hashWeights(model);
          chorus::check(chorusAllGather(&mine, all.data(), 1, chorusUint64, comm, nullptr));
          for (int r = 1; r < nranks; ++r) {
            if (all[r] != all[0]) {
              throw std::runtime_error("after step " + std::to_string(step) + " rank " + std::to_string(r) +
                                       "'s weights differ from rank 0's");
            }
          }
          ++checkedSteps;
        }
        if (logNow) {
          std::printf("step %lld epoch %lld loss %.4f\n", static_cast<long long>(step + 1),
                      static_cast<long long>(step / sampler.stepsPerEpoch()), loss);
          std::fflush(stdout);
        }
        if (step + 1 == saveAt) {
          if (savePath.empty()) throw std::runtime_error("--save-at needs --save");
          if (rank == 0) save(savePath, model, step + 1);
          barrier(comm);
          if (load(savePath, model) != step + 1) throw std::runtime_error("the checkpoint holds another step");
          if (onGpu) gpuTrainer->upload(model);
          if (rank == 0)
            std::printf("saved and reloaded %s after step %lld\n", savePath.c_str(), static_cast<long long>(step + 1));
        }
      } catch (const chorus::Error& e) {
        if (!survive) throw;
        step = goOn(e, step + (updated ? 1 : 0)) - 1;
      }
    }
    if (onGpu) {
      gpuTrainer->synchronize();
      gpuTrainer->download(model);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const chorusDdpStats_t s = ddp.stats();
    int status = 0;
    if (rank == 0) {
      std::printf("trained %lld steps in %.2f s; %d buckets (largest %.2f MiB)%s\n", static_cast<long long>(steps),
                  seconds, s.nbuckets, s.largestBucketBytes / 1048576.0, s.rebuilt ? ", rebuilt in ready order" : "");
      if (checkSync) {
        std::printf("weights identical on all %d ranks after each of %lld steps\n", nranks,
                    static_cast<long long>(checkedSteps));
      }
      if (bench && !stepMs.empty()) {
        std::vector<double> sorted = stepMs;
        std::sort(sorted.begin(), sorted.end());
        const double n = static_cast<double>(stepMs.size());
        const double comm = (s.totalCommSeconds - commBefore) * 1e3 / n;
        const double exposed = (s.totalExposedSeconds - exposedBefore) * 1e3 / n;
        std::printf(
            "bench reduction=%s buckets=%d ranks=%d steps=%zu median_ms_per_step=%.3f comm_ms_per_step=%.3f "
            "exposed_ms_per_step=%.3f hidden_fraction=%.3f\n",
            buckets.c_str(), s.nbuckets, nranks, stepMs.size(), sorted[sorted.size() / 2], comm, exposed,
            comm > 0 ? 1.0 - exposed / comm : 0.0);
      }
      if (!dump.empty()) {
        std::ofstream f(dump, std::ios::binary);
        for (auto& p : model.w) f.write(reinterpret_cast<const char*>(p.data()), std::streamsize(p.size() * 4));
        if (!f) throw std::runtime_error("cannot write " + dump);
      }
      if (!compare.empty()) {
        std::ifstream f(compare, std::ios::binary);
        double worst = 0, worstAbs = 0;
        size_t bad = 0, total = 0;
        for (auto& p : model.w) {
          std::vector<float> ref(p.size());
          f.read(reinterpret_cast<char*>(ref.data()), std::streamsize(ref.size() * 4));
          for (size_t i = 0; i < p.size(); ++i, ++total) {
            const double d = std::fabs(double(p[i]) - ref[i]);
            worstAbs = std::max(worstAbs, d);
            if (std::fabs(ref[i]) >= 1e-4) worst = std::max(worst, d / std::fabs(ref[i]));
            if (!(d <= rtol * std::fabs(ref[i]) + 1e-8)) ++bad;
          }
        }
        if (!f) throw std::runtime_error(compare + " does not hold this model's weights");
        std::printf(
            "compared with %s: %zu of %zu weights outside rtol %g; largest difference %.3g, relative %.3g "
            "(weights of magnitude 1e-4 or more)\n",
            compare.c_str(), bad, total, rtol, worstAbs, worst);
        if (bad) status = 1;
      }
      if (eval) {
        const DataSet test = loadSplit(data, "t10k");
        const double acc = accuracy(model, test);
        std::printf("test accuracy %.4f (chance 0.10)\n", acc);
        if (acc < minAccuracy) {
          std::printf("test accuracy below --min-accuracy %.3f\n", minAccuracy);
          status = 1;
        }
      }
      std::fflush(stdout);
    }
    barrier(comm);
    gpuTrainer.reset();
    { chorus::DdpReducer done(std::move(ddp)); }  // the reducer goes before its communicator
    chorus::check(chorusCommDestroy(comm));
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_mnist: %s\n", e.what());
    return 1;
  }
}
