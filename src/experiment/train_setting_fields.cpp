// train's settings bound to their table (experiment/train_settings.hpp): each entry's field of
// TrainArgs, which holds its value (the command's options are made on it, app/setting_options.hpp),
// and the value read back for the recorded configuration (describe_run). A new setting's field goes here.
#include <functional>
#include <map>

#include "experiment/setting_fields.hpp"
#include "experiment/train_run.hpp"

namespace cnnscale {

SettingField train_setting_field(TrainArgs& a, const std::string& name) {
  static const std::map<std::string, std::function<SettingField(TrainArgs&)>> fields = {
      {"network", [](TrainArgs& a) -> SettingField { return &a.net; }},
      {"epochs", [](TrainArgs& a) -> SettingField { return &a.epochs; }},
      {"iterations", [](TrainArgs& a) -> SettingField { return &a.iterations; }},
      {"device", [](TrainArgs& a) -> SettingField { return &a.device; }},
      {"precision", [](TrainArgs& a) -> SettingField { return &a.precision; }},
      {"measure", [](TrainArgs& a) -> SettingField { return &a.measure_mode; }},
      {"whole_epochs", [](TrainArgs& a) -> SettingField { return &a.measure.whole_epochs; }},
      {"whole_samples", [](TrainArgs& a) -> SettingField { return &a.measure.whole_samples; }},
      {"seed", [](TrainArgs& a) -> SettingField { return &a.options.seed; }},
      {"lr", [](TrainArgs& a) -> SettingField { return &a.solver.lr; }},
      {"lr_scaling", [](TrainArgs& a) -> SettingField { return &a.solver.lr_scaling; }},
      {"lr_base_batch", [](TrainArgs& a) -> SettingField { return &a.solver.lr_base_batch; }},
      {"momentum", [](TrainArgs& a) -> SettingField { return &a.solver.momentum; }},
      {"weight_decay", [](TrainArgs& a) -> SettingField { return &a.solver.weight_decay; }},
      {"lr_policy", [](TrainArgs& a) -> SettingField { return &a.lr_policy; }},
      {"gamma", [](TrainArgs& a) -> SettingField { return &a.solver.gamma; }},
      {"step", [](TrainArgs& a) -> SettingField { return &a.solver.step_epochs; }},
      {"milestones", [](TrainArgs& a) -> SettingField { return &a.solver.milestones; }},
      {"power", [](TrainArgs& a) -> SettingField { return &a.solver.power; }},
      {"warmup", [](TrainArgs& a) -> SettingField { return &a.solver.warmup_epochs; }},
      {"warmup_iterations", [](TrainArgs& a) -> SettingField { return &a.solver.warmup_iterations; }},
      {"warmup_start_factor", [](TrainArgs& a) -> SettingField { return &a.solver.warmup_start_factor; }},
      {"cuda_graph", [](TrainArgs& a) -> SettingField { return &a.options.cuda_graph; }},
      {"graph_copies", [](TrainArgs& a) -> SettingField { return &a.options.graph_copies; }},
      {"phase_marks", [](TrainArgs& a) -> SettingField { return &a.options.phase_marks; }},
      {"fuse", [](TrainArgs& a) -> SettingField { return &a.options.fuse_epilogues; }},
      {"conv_search", [](TrainArgs& a) -> SettingField { return &a.conv_search; }},
      {"layout", [](TrainArgs& a) -> SettingField { return &a.layout; }},
      {"batchnorm", [](TrainArgs& a) -> SettingField { return &a.batchnorm; }},
      {"deterministic", [](TrainArgs& a) -> SettingField { return &a.deterministic; }},
      {"host_decode", [](TrainArgs& a) -> SettingField { return &a.host_decode; }},
      {"crop_pad", [](TrainArgs& a) -> SettingField { return &a.options.augment.crop_pad; }},
      {"mirror", [](TrainArgs& a) -> SettingField { return &a.options.augment.mirror; }},
      {"timing_warmup", [](TrainArgs& a) -> SettingField { return &a.options.timing_warmup; }},
      {"checkpoint_dir", [](TrainArgs& a) -> SettingField { return &a.options.checkpoint_dir; }},
      {"checkpoint_every", [](TrainArgs& a) -> SettingField { return &a.options.checkpoint_every; }},
      {"resume", [](TrainArgs& a) -> SettingField { return &a.options.resume; }},
      {"resume_allow_changes", [](TrainArgs& a) -> SettingField { return &a.options.resume_allow_changes; }},
      {"display", [](TrainArgs& a) -> SettingField { return &a.options.display; }},
      {"data_threads", [](TrainArgs& a) -> SettingField { return &a.options.data_threads; }},
      {"test_batch", [](TrainArgs& a) -> SettingField { return &a.options.test_batch; }},
      {"pool_batches", [](TrainArgs& a) -> SettingField { return &a.pool_batches; }},
      {"power_hz", [](TrainArgs& a) -> SettingField { return &a.measure.power_hz; }},
      {"min_window", [](TrainArgs& a) -> SettingField { return &a.measure.min_window; }},
      {"phase_window", [](TrainArgs& a) -> SettingField { return &a.measure.phase_window; }},
      {"phase_repeats", [](TrainArgs& a) -> SettingField { return &a.measure.phase_repeats; }},
      {"mfu", [](TrainArgs& a) -> SettingField { return &a.mfu; }},
      {"mfu_window", [](TrainArgs& a) -> SettingField { return &a.measure.mfu_window; }},
      {"overlap", [](TrainArgs& a) -> SettingField { return &a.parallel.overlap; }},
      {"algo", [](TrainArgs& a) -> SettingField { return &a.parallel.algo; }},
      {"dtype", [](TrainArgs& a) -> SettingField { return &a.parallel.allreduce_dtype; }},
      {"max_ctas", [](TrainArgs& a) -> SettingField { return &a.parallel.allreduce_max_ctas; }},
      {"cta_policy", [](TrainArgs& a) -> SettingField { return &a.parallel.allreduce_cta_policy; }},
      {"priority", [](TrainArgs& a) -> SettingField { return &a.parallel.allreduce_priority; }},
      {"update", [](TrainArgs& a) -> SettingField { return &a.parallel.update_per_bucket; }},
      {"gather", [](TrainArgs& a) -> SettingField { return &a.parallel.gather_gradients; }},
      {"split", [](TrainArgs& a) -> SettingField { return &a.parallel.split; }},
      {"auto_start", [](TrainArgs& a) -> SettingField { return &a.parallel.auto_start; }},
      {"shares", [](TrainArgs& a) -> SettingField { return &a.parallel.shares; }},
      {"rebalance_every", [](TrainArgs& a) -> SettingField { return &a.parallel.rebalance_every; }},
      {"probe_seconds", [](TrainArgs& a) -> SettingField { return &a.parallel.probe_seconds; }},
      {"bucket_mb", [](TrainArgs& a) -> SettingField { return &a.parallel.bucket_mb; }},
      {"one_rank_exchange", [](TrainArgs& a) -> SettingField { return &a.parallel.one_rank_exchange; }},
      {"watchdog_timeout", [](TrainArgs& a) -> SettingField { return &a.parallel.watchdog_timeout; }},
      {"name", [](TrainArgs& a) -> SettingField { return &a.data; }},
      {"data_dir", [](TrainArgs& a) -> SettingField { return &a.data_dir; }},
      {"train_samples", [](TrainArgs& a) -> SettingField { return &a.train_samples; }},
      {"test_samples", [](TrainArgs& a) -> SettingField { return &a.test_samples; }},
      {"synthetic_fill", [](TrainArgs& a) -> SettingField { return &a.synthetic_fill; }},
      {"classes", [](TrainArgs& a) -> SettingField { return &a.classes; }},
      {"input_shape", [](TrainArgs& a) -> SettingField { return &a.input_shape; }},
      {"batch", [](TrainArgs& a) -> SettingField { return &a.options.batch; }},
      {"batch_per_rank", [](TrainArgs& a) -> SettingField { return &a.parallel.batch_per_rank; }},
      {"gpu_mix", [](TrainArgs& a) -> SettingField { return &a.parallel.gpus; }},
      {"sms", [](TrainArgs& a) -> SettingField { return &a.parallel.sm_counts; }},
      {"cpu_mix", [](TrainArgs& a) -> SettingField { return &a.parallel.slowdown; }},
  };
  const auto it = fields.find(name);
  if (it == fields.end()) throw_runtime("train setting '{}' has no field in TrainArgs (train_setting_fields.cpp)", name);
  return it->second(a);
}

TrainArgs default_train_args() {
  TrainArgs a;
  for (const TrainSetting& s : train_settings()) set_field(train_setting_field(a, s.name), s.default_value);
  return a;
}

nlohmann::json setting_value(const TrainArgs& a, const TrainSetting& s) {
  return field_value(train_setting_field(const_cast<TrainArgs&>(a), s.name));
}

}  // namespace cnnscale
