// The summary figures' tables (see summary_schema.hpp), in results/README.md's order, and the
// conversion of RunSummary / RankSummary to and from named values that every writer and the reader use.
#include "io/summary_schema.hpp"

#include <algorithm>
#include <array>

#include "core/error.hpp"

namespace cnnscale {

namespace {

using K = FigureKind;
using Run = FigureField<RunSummary>;
using Rank = FigureField<RankSummary>;

// A figure with its `_std` companion (mean and sample std over repeats) is listed as two rows.
constexpr std::array kRunFields = std::to_array<Run>({
    {{"net", K::Text, ""}, &RunSummary::net},
    {{"data", K::Text, ""}, &RunSummary::data},
    {{"device", K::Text, ""}, &RunSummary::device},
    {{"precision", K::Text, ""}, &RunSummary::precision},
    {{"measure", K::Text, ""}, &RunSummary::measure},
    {{"allreduce_algo", K::Text, ""}, &RunSummary::allreduce_algo},
    {{"allreduce_dtype", K::Text, ""}, &RunSummary::allreduce_dtype},
    {{"allreduce_tuning", K::Text, ""}, &RunSummary::allreduce_tuning},
    {{"gpu_names", K::Text, ""}, &RunSummary::gpu_names},
    {{"world_size", K::Count, ""}, &RunSummary::world_size},
    {{"global_batch", K::Count, "samples"}, &RunSummary::global_batch},
    {{"seed", K::Count, ""}, &RunSummary::seed},
    {{"iterations", K::Count, ""}, &RunSummary::iterations},
    {{"iterations_per_epoch", K::Count, ""}, &RunSummary::iterations_per_epoch},
    {{"allreduce_overlap", K::Count, ""}, &RunSummary::allreduce_overlap},
    {{"lr", K::Number, ""}, &RunSummary::lr},
    {{"lr_scaled", K::Number, ""}, &RunSummary::lr_scaled},
    {{"lr_scaling", K::Text, ""}, &RunSummary::lr_scaling},
    {{"lr_base_batch", K::Count, "samples"}, &RunSummary::lr_base_batch},
    {{"lr_policy", K::Text, ""}, &RunSummary::lr_policy},
    {{"lr_gamma", K::Number, ""}, &RunSummary::lr_gamma},
    {{"lr_step_epochs", K::Number, "epochs"}, &RunSummary::lr_step_epochs},
    {{"lr_milestones", K::Text, ""}, &RunSummary::lr_milestones},
    {{"lr_power", K::Number, ""}, &RunSummary::lr_power},
    {{"warmup_epochs", K::Number, "epochs"}, &RunSummary::warmup_epochs},
    {{"warmup_iterations", K::Count, ""}, &RunSummary::warmup_iterations},
    {{"warmup_start_factor", K::Number, ""}, &RunSummary::warmup_start_factor},
    {{"momentum", K::Number, ""}, &RunSummary::momentum},
    {{"weight_decay", K::Number, ""}, &RunSummary::weight_decay},
    {{"one_rank_exchange", K::Count, ""}, &RunSummary::one_rank_exchange},
    {{"skipped_steps", K::Count, ""}, &RunSummary::skipped_steps},
    {{"final_grad_scale", K::Number, ""}, &RunSummary::final_grad_scale},
    {{"peak_memory_bytes", K::Count, "bytes"}, &RunSummary::peak_memory_bytes},
    {{"cuda_graph", K::Text, ""}, &RunSummary::cuda_graph},
    {{"graph_replays", K::Count, ""}, &RunSummary::graph_replays},
    {{"matmul_peak_tflops", K::Number, "TFLOP/s"}, &RunSummary::matmul_peak_tflops},
    {{"mfu", K::Number, ""}, &RunSummary::mfu},
    {{"threads_per_rank", K::Count, ""}, &RunSummary::threads_per_rank},
    {{"window_iterations", K::Count, ""}, &RunSummary::window_iterations},
    {{"window_extension_iterations", K::Count, ""}, &RunSummary::window_extension_iterations},
    {{"window_seconds", K::Number, "s"}, &RunSummary::window_seconds},
    {{"seconds_per_batch", K::Number, "s"}, &RunSummary::seconds_per_batch},
    {{"samples_per_s", K::Number, "samples/s"}, &RunSummary::samples_per_s},
    {{"joules_per_batch", K::Number, "J"}, &RunSummary::joules_per_batch},
    {{"watts", K::Number, "W"}, &RunSummary::watts},
    {{"joules_per_sample", K::Number, "J"}, &RunSummary::joules_per_sample},
    {{"gflops", K::Number, "GFLOP/s"}, &RunSummary::gflops},
    {{"gflops_per_watt", K::Number, "GFLOP/s/W"}, &RunSummary::gflops_per_watt},
    {{"edp_batch_js", K::Number, "J s"}, &RunSummary::edp_batch_js},
    {{"whole_epochs", K::Count, ""}, &RunSummary::whole_epochs},
    {{"whole_iterations", K::Count, ""}, &RunSummary::whole_iterations},
    {{"whole_training_seconds", K::Number, "s"}, &RunSummary::whole_training_seconds},
    {{"whole_training_joules", K::Number, "J"}, &RunSummary::whole_training_joules},
    {{"edp_training_js", K::Number, "J s"}, &RunSummary::edp_training_js},
    {{"cpu_package_joules_per_batch", K::Number, "J"}, &RunSummary::cpu_package_joules_per_batch},
    {{"cpu_dram_joules_per_batch", K::Number, "J"}, &RunSummary::cpu_dram_joules_per_batch},
    {{"time_data_s", K::Number, "s"}, &RunSummary::time_data_s},
    {{"time_h2d_s", K::Number, "s"}, &RunSummary::time_h2d_s},
    {{"time_forward_s", K::Number, "s"}, &RunSummary::time_forward_s},
    {{"time_backward_s", K::Number, "s"}, &RunSummary::time_backward_s},
    {{"time_allreduce_s", K::Number, "s"}, &RunSummary::time_allreduce_s},
    {{"time_comm_busy_s", K::Number, "s"}, &RunSummary::time_comm_busy_s},
    {{"time_update_s", K::Number, "s"}, &RunSummary::time_update_s},
    {{"time_total_s", K::Number, "s"}, &RunSummary::time_total_s},
    {{"input_wait_share", K::Number, ""}, &RunSummary::input_wait_share},
    {{"input_bound", K::Count, ""}, &RunSummary::input_bound},
    {{"loop_forward_s", K::Number, "s"}, &RunSummary::loop_forward_s},
    {{"loop_forward_s_std", K::Number, "s"}, &RunSummary::loop_forward_s_std},
    {{"loop_backward_s", K::Number, "s"}, &RunSummary::loop_backward_s},
    {{"loop_backward_s_std", K::Number, "s"}, &RunSummary::loop_backward_s_std},
    {{"loop_update_allreduce_s", K::Number, "s"}, &RunSummary::loop_update_allreduce_s},
    {{"loop_update_allreduce_s_std", K::Number, "s"}, &RunSummary::loop_update_allreduce_s_std},
    {{"loop_pooled_repeats", K::Count, ""}, &RunSummary::loop_pooled_repeats},
    {{"energy_forward_j", K::Number, "J"}, &RunSummary::energy_forward_j},
    {{"energy_forward_j_std", K::Number, "J"}, &RunSummary::energy_forward_j_std},
    {{"energy_backward_j", K::Number, "J"}, &RunSummary::energy_backward_j},
    {{"energy_backward_j_std", K::Number, "J"}, &RunSummary::energy_backward_j_std},
    {{"energy_update_allreduce_j", K::Number, "J"}, &RunSummary::energy_update_allreduce_j},
    {{"energy_update_allreduce_j_std", K::Number, "J"}, &RunSummary::energy_update_allreduce_j_std},
    {{"energy_full_step_j", K::Number, "J"}, &RunSummary::energy_full_step_j},
    {{"energy_full_step_j_std", K::Number, "J"}, &RunSummary::energy_full_step_j_std},
    {{"final_loss", K::Number, ""}, &RunSummary::final_loss},
    {{"test_top1", K::Number, ""}, &RunSummary::test_top1},
    {{"test_top5", K::Number, ""}, &RunSummary::test_top5},
    {{"test_loss", K::Number, ""}, &RunSummary::test_loss},
    {{"split", K::Text, ""}, &RunSummary::split},
    {{"split_shares", K::Text, ""}, &RunSummary::split_shares},
    {{"split_changes", K::Count, ""}, &RunSummary::split_changes},
    {{"mix", K::Text, ""}, &RunSummary::mix},
    {{"imbalance", K::Number, ""}, &RunSummary::imbalance},
    {{"waiting_joules_per_batch", K::Number, "J"}, &RunSummary::waiting_joules_per_batch},
    {{"ideal_samples_per_s", K::Number, "samples/s"}, &RunSummary::ideal_samples_per_s},
    {{"efficiency", K::Number, ""}, &RunSummary::efficiency},
    {{"predicted_seconds_per_batch", K::Number, "s"}, &RunSummary::predicted_seconds_per_batch},
    {{"predicted_joules_per_sample", K::Number, "J"}, &RunSummary::predicted_joules_per_sample},
});

constexpr std::array kRankFields = std::to_array<Rank>({
    {{"rank", K::Count, ""}, &RankSummary::rank},
    {{"host", K::Text, ""}, &RankSummary::host},
    {{"gpu_uuid", K::Text, ""}, &RankSummary::gpu_uuid},
    {{"local_batch", K::Count, "samples"}, &RankSummary::local_batch},
    {{"seconds_per_batch", K::Number, "s"}, &RankSummary::seconds_per_batch},
    {{"samples_per_s", K::Number, "samples/s"}, &RankSummary::samples_per_s},
    {{"joules_per_batch", K::Number, "J"}, &RankSummary::joules_per_batch},
    {{"watts", K::Number, "W"}, &RankSummary::watts},
    {{"joules_per_sample", K::Number, "J"}, &RankSummary::joules_per_sample},
    {{"gflops", K::Number, "GFLOP/s"}, &RankSummary::gflops},
    {{"gflops_per_watt", K::Number, "GFLOP/s/W"}, &RankSummary::gflops_per_watt},
    {{"edp_batch_js", K::Number, "J s"}, &RankSummary::edp_batch_js},
    {{"whole_training_seconds", K::Number, "s"}, &RankSummary::whole_training_seconds},
    {{"whole_training_joules", K::Number, "J"}, &RankSummary::whole_training_joules},
    {{"edp_training_js", K::Number, "J s"}, &RankSummary::edp_training_js},
    {{"gpu_sampled_joules_per_batch", K::Number, "J"}, &RankSummary::gpu_sampled_joules_per_batch},
    {{"cpu_package_joules_per_batch", K::Number, "J"}, &RankSummary::cpu_package_joules_per_batch},
    {{"compute_s", K::Number, "s"}, &RankSummary::compute_s},
    {{"exchange_wait_s", K::Number, "s"}, &RankSummary::exchange_wait_s},
    {{"imbalance_wait_s", K::Number, "s"}, &RankSummary::imbalance_wait_s},
    {{"wait_watts", K::Number, "W"}, &RankSummary::wait_watts},
    {{"waiting_joules_per_batch", K::Number, "J"}, &RankSummary::waiting_joules_per_batch},
    {{"sms", K::Count, ""}, &RankSummary::sms},
    {{"slowdown", K::Number, ""}, &RankSummary::slowdown},
    {{"peak_memory_bytes", K::Count, "bytes"}, &RankSummary::peak_memory_bytes},
    {{"cuda_graph", K::Text, ""}, &RankSummary::cuda_graph},
    {{"graph_replays", K::Count, ""}, &RankSummary::graph_replays},
});

// Text figures are TextFigure members, the others NumberFigure: checked here so that no row can
// pair a count with a string member.
template <class Summary, size_t N>
constexpr bool kinds_match(const std::array<FigureField<Summary>, N>& fields) {
  return std::all_of(fields.begin(), fields.end(), [](const FigureField<Summary>& f) {
    return (f.kind == K::Text) == (f.member.index() == 1);
  });
}
static_assert(kinds_match(kRunFields) && kinds_match(kRankFields));

constexpr SummaryField kTag = {"tag.", K::Text, ""};
constexpr std::string_view kTagPrefix = kTag.name;

template <class Summary>
void put_values(const Summary& s, std::span<const FigureField<Summary>> fields, SummaryValues& out) {
  for (const auto& f : fields) {
    std::visit(
        [&](auto member) {
          const auto& figure = s.*member;
          if (figure.has_value())
            out[std::string(f.name)] = figure.value();
          else if (figure.is_null())
            out[std::string(f.name)] = std::monostate{};
        },
        f.member);
  }
}

// The figure of one named value: a number or null for a NumberFigure, a string or null for a TextFigure.
template <class T>
Figure<T> figure_of(const SummaryValue& v, std::string_view name) {
  if (std::holds_alternative<std::monostate>(v)) return Figure<T>::null();
  if (const T* x = std::get_if<T>(&v)) return *x;
  const char* const found = std::holds_alternative<double>(v) ? "number" : "string";
  throw_config("summary figure '{}' is a {}, expected a {}", name, found,
               std::is_same_v<T, double> ? "number" : "string");
}

// Fills the named figure's member; a name `fields` lacks is skipped.
template <class Summary>
void take_value(Summary& s, std::span<const FigureField<Summary>> fields, const std::string& name,
                const SummaryValue& v) {
  const auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.name == name; });
  if (f == fields.end()) return;
  std::visit(
      [&](auto member) {
        auto& figure = s.*member;
        figure = figure_of<typename std::remove_reference_t<decltype(figure)>::value_type>(v, name);
      },
      f->member);
}

}  // namespace

std::span<const FigureField<RunSummary>> run_summary_fields() { return kRunFields; }
std::span<const FigureField<RankSummary>> rank_summary_fields() { return kRankFields; }

const SummaryField* find_summary_field(std::string_view name) {
  for (const SummaryField& f : run_summary_fields())
    if (f.name == name) return &f;
  for (const SummaryField& f : rank_summary_fields())
    if (f.name == name) return &f;
  return name.starts_with(kTagPrefix) ? &kTag : nullptr;
}

SummaryValues summary_values(const RunSummary& s) {
  SummaryValues out;
  put_values(s, run_summary_fields(), out);
  for (const auto& [key, value] : s.tags) out[std::string(kTagPrefix).append(key)] = value;
  return out;
}

SummaryValues summary_values(const RankSummary& s) {
  SummaryValues out;
  put_values(s, rank_summary_fields(), out);
  return out;
}

SummaryValue summary_value(const RunSummary& s, std::string_view name) {
  if (name.starts_with(kTagPrefix)) {
    const auto it = s.tags.find(std::string(name.substr(kTagPrefix.size())));
    return it == s.tags.end() ? SummaryValue() : SummaryValue(it->second);
  }
  const auto fields = run_summary_fields();
  const auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.name == name; });
  if (f == fields.end()) return {};
  return std::visit(
      [&](auto member) {
        const auto& figure = s.*member;
        return figure.has_value() ? SummaryValue(figure.value()) : SummaryValue();
      },
      f->member);
}

RunSummary run_summary_from_values(const SummaryValues& values) {
  RunSummary s;
  for (const auto& [name, v] : values) {
    if (name.starts_with(kTagPrefix)) {
      s.tags[name.substr(kTagPrefix.size())] = figure_of<std::string>(v, name).value_or("");
      continue;
    }
    take_value(s, run_summary_fields(), name, v);
  }
  return s;
}

RankSummary rank_summary_from_values(const SummaryValues& values) {
  RankSummary s;
  for (const auto& [name, v] : values) take_value(s, rank_summary_fields(), name, v);
  return s;
}

}  // namespace cnnscale
