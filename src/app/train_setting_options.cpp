// train's settings on the command line, from their table (experiment/train_settings.hpp): each entry's
// option (flag, help, default, checks) bound to the field of TrainArgs that holds its value, and the
// value read back for the recorded configuration (describe_run). A new setting's field goes here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <variant>

#include "app/count_option.hpp"
#include "app/train_run.hpp"

namespace cnnscale::app {

namespace {

using Field = std::variant<uint64_t*, int64_t*, double*, std::string*, std::vector<double>*>;

Field field_of(TrainArgs& a, const std::string& name) {
  static const std::map<std::string, std::function<Field(TrainArgs&)>> fields = {
      {"seed", [](TrainArgs& a) -> Field { return &a.options.seed; }},
      {"lr", [](TrainArgs& a) -> Field { return &a.solver.lr; }},
      {"lr_scaling", [](TrainArgs& a) -> Field { return &a.solver.lr_scaling; }},
      {"lr_base_batch", [](TrainArgs& a) -> Field { return &a.solver.lr_base_batch; }},
      {"momentum", [](TrainArgs& a) -> Field { return &a.solver.momentum; }},
      {"weight_decay", [](TrainArgs& a) -> Field { return &a.solver.weight_decay; }},
      {"lr_policy", [](TrainArgs& a) -> Field { return &a.lr_policy; }},
      {"gamma", [](TrainArgs& a) -> Field { return &a.solver.gamma; }},
      {"step", [](TrainArgs& a) -> Field { return &a.solver.step_epochs; }},
      {"milestones", [](TrainArgs& a) -> Field { return &a.solver.milestones; }},
      {"power", [](TrainArgs& a) -> Field { return &a.solver.power; }},
      {"warmup", [](TrainArgs& a) -> Field { return &a.solver.warmup_epochs; }},
      {"warmup_iterations", [](TrainArgs& a) -> Field { return &a.solver.warmup_iterations; }},
      {"warmup_start_factor", [](TrainArgs& a) -> Field { return &a.solver.warmup_start_factor; }},
  };
  const auto it = fields.find(name);
  if (it == fields.end()) throw_runtime("train setting '{}' has no field in TrainArgs (train_setting_options.cpp)", name);
  return it->second(a);
}

// The table's default into the field, so that the table is where a default is written.
void set_default(const Field& field, const nlohmann::json& value) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        *p = value.get<T>();
      },
      field);
}

}  // namespace

void add_setting_options(CLI::App& cmd, TrainArgs& a) {
  for (const TrainSetting& s : train_settings()) {
    const Field field = field_of(a, s.name);
    set_default(field, s.default_value);
    CLI::Option* option = std::visit([&](auto* p) { return cmd.add_option(s.flag, *p, s.help); }, field);
    if (s.type == SettingType::NumberList) {
      option->delimiter(',');
      continue;  // no default to show: none
    }
    if (s.type == SettingType::Choice) option->check(CLI::IsMember(s.choices));
    if (s.cli_checks_range) option->check(at_least(static_cast<long long>(s.min)));
    option->capture_default_str();
  }
  // Warm-up has one length: in epochs or in iterations.
  cmd.get_option("--warmup")->excludes(cmd.get_option("--warmup-iterations"));
}

nlohmann::json setting_value(const TrainArgs& a, const TrainSetting& s) {
  return std::visit([](auto* p) { return nlohmann::json(*p); }, field_of(const_cast<TrainArgs&>(a), s.name));
}

}  // namespace cnnscale::app
