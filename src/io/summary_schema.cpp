// The summary figures' table (see summary_schema.hpp); the order is results/README.md's.
#include "io/summary_schema.hpp"

#include <array>

namespace cnnscale {

namespace {

using K = FigureKind;

// A figure with its `_std` companion (mean and sample std over repeats) is listed as two rows.
constexpr std::array kRunFields = std::to_array<SummaryField>({
    {"net", K::Text, ""},
    {"data", K::Text, ""},
    {"device", K::Text, ""},
    {"precision", K::Text, ""},
    {"measure", K::Text, ""},
    {"allreduce_algo", K::Text, ""},
    {"gpu_names", K::Text, ""},
    {"world_size", K::Count, ""},
    {"global_batch", K::Count, "samples"},
    {"seed", K::Count, ""},
    {"iterations", K::Count, ""},
    {"iterations_per_epoch", K::Count, ""},
    {"allreduce_overlap", K::Count, ""},
    {"threads_per_rank", K::Count, ""},
    {"window_iterations", K::Count, ""},
    {"window_extension_iterations", K::Count, ""},
    {"window_seconds", K::Number, "s"},
    {"seconds_per_batch", K::Number, "s"},
    {"samples_per_s", K::Number, "samples/s"},
    {"joules_per_batch", K::Number, "J"},
    {"watts", K::Number, "W"},
    {"joules_per_sample", K::Number, "J"},
    {"gflops", K::Number, "GFLOP/s"},
    {"gflops_per_watt", K::Number, "GFLOP/s/W"},
    {"edp_batch_js", K::Number, "J s"},
    {"whole_epochs", K::Count, ""},
    {"whole_iterations", K::Count, ""},
    {"whole_training_seconds", K::Number, "s"},
    {"whole_training_joules", K::Number, "J"},
    {"edp_training_js", K::Number, "J s"},
    {"cpu_package_joules_per_batch", K::Number, "J"},
    {"cpu_dram_joules_per_batch", K::Number, "J"},
    {"time_data_s", K::Number, "s"},
    {"time_h2d_s", K::Number, "s"},
    {"time_forward_s", K::Number, "s"},
    {"time_backward_s", K::Number, "s"},
    {"time_allreduce_s", K::Number, "s"},
    {"time_comm_busy_s", K::Number, "s"},
    {"time_update_s", K::Number, "s"},
    {"time_total_s", K::Number, "s"},
    {"loop_forward_s", K::Number, "s"},
    {"loop_forward_s_std", K::Number, "s"},
    {"loop_backward_s", K::Number, "s"},
    {"loop_backward_s_std", K::Number, "s"},
    {"loop_update_allreduce_s", K::Number, "s"},
    {"loop_update_allreduce_s_std", K::Number, "s"},
    {"loop_pooled_repeats", K::Count, ""},
    {"energy_forward_j", K::Number, "J"},
    {"energy_forward_j_std", K::Number, "J"},
    {"energy_backward_j", K::Number, "J"},
    {"energy_backward_j_std", K::Number, "J"},
    {"energy_update_allreduce_j", K::Number, "J"},
    {"energy_update_allreduce_j_std", K::Number, "J"},
    {"energy_full_step_j", K::Number, "J"},
    {"energy_full_step_j_std", K::Number, "J"},
    {"final_loss", K::Number, ""},
    {"test_top1", K::Number, ""},
    {"test_top5", K::Number, ""},
    {"test_loss", K::Number, ""},
});

constexpr std::array kRankFields = std::to_array<SummaryField>({
    {"rank", K::Count, ""},
    {"host", K::Text, ""},
    {"gpu_uuid", K::Text, ""},
    {"local_batch", K::Count, "samples"},
    {"seconds_per_batch", K::Number, "s"},
    {"samples_per_s", K::Number, "samples/s"},
    {"joules_per_batch", K::Number, "J"},
    {"watts", K::Number, "W"},
    {"joules_per_sample", K::Number, "J"},
    {"gflops", K::Number, "GFLOP/s"},
    {"gflops_per_watt", K::Number, "GFLOP/s/W"},
    {"edp_batch_js", K::Number, "J s"},
    {"whole_training_seconds", K::Number, "s"},
    {"whole_training_joules", K::Number, "J"},
    {"edp_training_js", K::Number, "J s"},
    {"gpu_sampled_joules_per_batch", K::Number, "J"},
    {"cpu_package_joules_per_batch", K::Number, "J"},
});

constexpr SummaryField kTag = {"tag.", K::Text, ""};

}  // namespace

std::span<const SummaryField> run_summary_fields() { return kRunFields; }
std::span<const SummaryField> rank_summary_fields() { return kRankFields; }

const SummaryField* find_summary_field(std::string_view name) {
  for (const auto fields : {run_summary_fields(), rank_summary_fields()})
    for (const SummaryField& f : fields)
      if (f.name == name) return &f;
  return name.starts_with(kTag.name) ? &kTag : nullptr;
}

}  // namespace cnnscale
