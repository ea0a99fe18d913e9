// The schema tables of `bench allreduce` results (see allreduce_results.hpp), in results/README.md's order.
#include "io/allreduce_results.hpp"

namespace cnnscale {

using namespace schema_presence;

std::span<const SchemaField<AllreduceSizeResult>> AllreduceSizeResult::fields() {
  using S = AllreduceSizeResult;
  static const std::vector<SchemaField<S>> f = {
      field<&S::bytes>("bytes", "bytes", R, "the message size"),
      field<&S::count>("count", "", O, "elements per rank"),
      field<&S::type>("type", "", O, "nccl-tests' name of the dtype: float, bfloat16, half"),
      field<&S::time_us>("time_us", "us", R, "one allreduce: median over repeats of each repeat's slowest rank"),
      field<&S::time_min_us>("time_min_us", "us", O, "the fastest repeat"),
      field<&S::time_max_us>("time_max_us", "us", O, "the slowest repeat"),
      field<&S::algbw_gbs>("algbw_gbs", "GB/s", R, "bytes / time (null where not finite)"),
      field<&S::busbw_gbs>("busbw_gbs", "GB/s", R, "algbw * 2(n-1)/n (null where not finite)"),
      field<&S::wrong>("wrong", "", O, "elements summed wrongly over all ranks (null without --check)"),
      field<&S::energy_iters>("energy_iters", "", O, "energy: allreduces of the energy run"),
      field<&S::energy_seconds>("energy_seconds", "s", O, "energy: the window, longest rank"),
      field<&S::joules>("joules", "J", O, "energy: per allreduce, every rank's GPU summed"),
      field<&S::nj_per_byte>("nj_per_byte", "nJ/B", O, "energy: joules / bytes * 1e9"),
      field<&S::dynamic_nj_per_byte>("dynamic_nj_per_byte", "nJ/B", O, "energy: the same above idle power"),
      field<&S::watts_per_device>("watts_per_device", "W", O, "energy: mean power per device"),
  };
  return f;
}

std::span<const SchemaField<AllreduceResult>> AllreduceResult::fields() {
  using A = AllreduceResult;
  static const std::vector<SchemaField<A>> f = {
      field<&A::benchmark>("benchmark", "", R, "allreduce"),
      field<&A::format>("format", "", R, "cnnscale-allreduce-bench-1"),
      field<&A::time>("time", "", R, "UTC start"),
      field<&A::host>("host", "", R, "rank 0's host"),
      field<&A::ranks>("ranks", "", R, "rank count"),
      field<&A::device>("device", "", R, "gpu (NCCL) or cpu (MPI_Allreduce)"),
      field<&A::algo>("algo", "", R, "NCCL_ALGO in effect, lower case (auto: unset; mpi on CPU)"),
      field<&A::max_ctas>("max_ctas", "", O, "--max-ctas (null: NCCL's choice)"),
      field<&A::cta_policy>("cta_policy", "", O, "--cta-policy (null: NCCL's)"),
      field<&A::priority>("priority", "", O, "--priority (null: the greatest)"),
      field<&A::issue>("issue", "", O, "graph or host (absent: host)"),
      field<&A::library>("library", "", R, "the library and its version"),
      field<&A::rank_devices>("rank_devices", "", R, "per rank: host and device"),
      field<&A::op>("op", "", O, "sum"),
      field<&A::in_place>("in_place", "", O, "true"),
      field<&A::warmup_iters>("warmup_iters", "", R, "-w: untimed allreduces per size"),
      field<&A::iters>("iters", "", R, "-n: allreduces per timed repeat"),
      field<&A::repeats>("repeats", "", O, "-r: timed repeats per size"),
      field<&A::checked>("checked", "", O, "--check given"),
      field<&A::dtype>("dtype", "", O, "the elements summed: fp32, bf16 or fp16 (absent: fp32)"),
      field<&A::time_definition>("time_definition", "", O, "how time_us was taken"),
      field<&A::busbw_definition>("busbw_definition", "", O, "how busbw_gbs follows from algbw_gbs"),
      field<&A::rows>("rows", "", R, "one per message size"),
      field<&A::nccl_env>("nccl_env", "", O, "GPU runs: rank 0's NCCL_* environment"),
      field<&A::energy_method>("energy_method", "", O, "energy only: how it was measured"),
      field<&A::energy_window_seconds>("energy_window_seconds", "s", O, "energy only: --energy-window"),
      field<&A::energy_settle_seconds>("energy_settle_seconds", "s", O, "energy only: --energy-settle"),
      field<&A::idle_watts_per_device>("idle_watts_per_device", "W", O, "energy only: mean idle power per GPU"),
      field<&A::provenance>("provenance", "", O, "the build, command line, start and end time and hosts"),
      field<&A::settings>("settings", "", O, "every setting of the command's table as it ran, {name: value} (absent in older files)"),
  };
  return f;
}

nlohmann::json allreduce_result_json(const AllreduceResult& r) { return to_json_object(r); }

AllreduceResult allreduce_result_from_json(const nlohmann::json& j, const std::string& file) {
  return from_json_object<AllreduceResult>(j, file);
}

}  // namespace cnnscale
