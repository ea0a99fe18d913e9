// Batch splitting, allreduce-algorithm and CTA-policy names, and host-side collectives over a
// Communicator.
#include "parallel/data_parallel.hpp"

#include "core/error.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

void check_global_batch(int64_t global_batch) {
  if (global_batch < 1) throw_config("--batch must be >= 1, got {}", global_batch);
}

std::vector<int64_t> split_global_batch(int64_t global_batch, int ranks) {
  CNNSCALE_CHECK(ranks >= 1, "{} ranks", ranks);
  if (global_batch < ranks)
    throw_config(
        "global batch {} cannot be split across {} ranks: every rank needs at least one sample (use a "
        "larger --batch, or --batch-per-rank)",
        global_batch, ranks);
  std::vector<int64_t> out(static_cast<size_t>(ranks), global_batch / ranks);
  for (int64_t r = 0; r < global_batch % ranks; ++r) ++out[static_cast<size_t>(r)];
  return out;
}

std::vector<int64_t> manual_split(int64_t global_batch, const std::vector<int64_t>& shares, int ranks) {
  if (shares.size() != static_cast<size_t>(ranks))
    throw_config("--shares: {} share(s) for {} rank(s): give one per rank, in rank order", shares.size(), ranks);
  int64_t sum = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    if (shares[r] < 1) throw_config("--shares: rank {} gets {} samples; every rank needs at least one", r, shares[r]);
    sum += shares[r];
  }
  if (sum != global_batch)
    throw_config("--shares: the shares sum to {}, but the global batch (--batch) is {}", sum, global_batch);
  return shares;
}

AllreduceAlgo parse_allreduce_algo(const std::string& text) {
  if (text == "ring") return AllreduceAlgo::Ring;
  if (text == "tree") return AllreduceAlgo::Tree;
  if (text == "auto") return AllreduceAlgo::Auto;
  throw_config("--allreduce-algo: expected ring, tree or auto, got '{}'", text);
}

std::string to_string(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::Ring:
      return "ring";
    case AllreduceAlgo::Tree:
      return "tree";
    case AllreduceAlgo::Auto:
      return "auto";
  }
  return "?";
}

CtaPolicy parse_cta_policy(const std::string& text, const std::string& what) {
  if (text == "default") return CtaPolicy::Default;
  if (text == "efficiency") return CtaPolicy::Efficiency;
  if (text == "zero") return CtaPolicy::Zero;
  throw_config("{}: expected default, efficiency or zero, got '{}'", what, text);
}

std::vector<float> allreduce_sum_host(Communicator& comm, Backend& backend, const std::vector<float>& values) {
  std::vector<float> out(values.size());
  if (values.empty()) return out;
  Tensor t = backend.alloc(Shape{static_cast<int64_t>(values.size())});
  backend.upload(values.data(), t);
  comm.allreduce_sum(t);
  BlockingOp op("download of reduced values");
  backend.download(t, out.data());
  return out;
}

std::vector<std::vector<float>> allgather_host(Communicator& comm, Backend& backend, const std::vector<float>& values) {
  const size_t n = values.size(), ranks = static_cast<size_t>(comm.size());
  std::vector<float> slots(n * ranks, 0.0f);
  std::copy(values.begin(), values.end(),
            slots.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(comm.rank())));
  std::vector<float> all = allreduce_sum_host(comm, backend, slots);
  std::vector<std::vector<float>> out(ranks);
  for (size_t r = 0; r < ranks; ++r)
    out[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * n),
                  all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
  return out;
}

}  // namespace cnnscale
