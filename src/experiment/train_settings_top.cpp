// The settings of `cnnscale train` that the experiment reads in forms of its own: the network
// (matrix.network, or networks), the run's length (epochs, iterations: the experiment also scales
// them per network with iteration_scale), the device (device: cpu | gpu | auto, bound per rank by the
// launcher), the precision (matrix.precision, with its int8 refusals), how a run is measured
// (measure) and the size of the whole-training figures (whole_epochs, whole_samples). Each is an
// entry of train's settings table all the same (part_of its own name, own_key its place), so that its
// option, its range, the sweep's command-line words, extra_args' refusal and its recording rule are
// declared here once; experiment_parse.cpp reads the keys, with the ranges declared here.
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

// An entry the experiment's own code reads: part_of its own name, given at `own_key` (or, where that
// is "", at the matrix axis of its name), listed in --help under `group`.
Setting own(Setting s, std::string own_key, const char* group, std::string flag = "") {
  s.part_of = s.name;
  s.own_key = std::move(own_key);
  s.group = group;
  if (!flag.empty()) s.flag = std::move(flag);
  return s;
}

}  // namespace

void add_top_settings(SettingTable& all) {
  // Not recorded under its flag: the run records the network it loaded (run_config.net, net_file), and
  // its resolved YAML enters the run id.
  {
    Setting s = own(text_setting("network", "", "Network: a name in networks/ (lenet) or a YAML file"), "",
                    option_group::kNetworkSolver, "--net");
    all.push_back(std::move(s));
  }
  // The run's length, given as epochs or as iterations (not both); neither: one epoch. -1 stands for
  // "not given" (below the range, so not shown as a default). Not part of the identity: a run resumed
  // for more iterations is the same configuration.
  // Checked from the least value up, so that the "not given" default is not shown.
  auto count = [](Setting s) {
    s.cli_check = CliCheck::AtLeast;
    return s;
  };
  all.push_back(own(count(integer_setting("epochs", -1, "Epochs to train; with neither this nor --iterations, one", 1,
                                          100000)),
                    "epochs (or iterations)", option_group::kEpochsData));
  all.push_back(own(count(integer_setting("iterations", -1, "Iterations to train", 1, double(int64_t(1) << 40))),
                    "iterations (or epochs, iteration_scale)", option_group::kEpochsData));
  {
    // Recorded always, as the device the job bound this rank to (gpu:N), not the words asking for it.
    Setting s = own(text_setting("device", "cpu", "cpu, gpu (under mpirun: the rank's GPU) or gpu:N"), "device",
                    option_group::kDeviceStep);
    s.record = Record::Always;
    s.resolve = [](const nlohmann::json&, const RunContext& c) -> nlohmann::json { return c.device; };
    all.push_back(std::move(s));
  }
  {
    Setting s = own(choice_setting("precision", "fp32",
                                   "fp32; tf32 (fp32 storage, TF32 tensor-core math); bf16 or fp16 (16-bit activations "
                                   "over fp32 master weights; fp16 with dynamic loss scaling). GPU only, except fp32",
                                   {"fp32", "tf32", "bf16", "fp16"}),
                    "", option_group::kDeviceStep);
    s.record = Record::NotDefault;  // fp32 runs keep the ids they had before precisions existed
    s.gpu_only = [](const nlohmann::json& v) { return v != "fp32"; };
    s.report_label = "precision";
    all.push_back(std::move(s));
  }
  {
    Setting s = own(choice_setting("measure", "steady",
                                   "steady: energy per iteration over the steady window; phases: also "
                                   "forward/backward/update split by phase-isolated loops",
                                   {"steady", "phases"}),
                    "measure", option_group::kMeasurement);
    all.push_back(std::move(s));
  }
  // The whole-training figures' size; 0 (below the range, not shown): the run's epochs, the data's size.
  all.push_back(own(count(integer_setting("whole_epochs", 0, "Epochs for the whole-training figures; default: the run's",
                                          1, 100000)),
                    "whole_epochs", option_group::kMeasurement));
  all.push_back(own(count(integer_setting("whole_samples", 0,
                                          "Training-set size for the whole-training figures; default: the data's", 1,
                                          double(int64_t(1) << 40))),
                    "whole_samples", option_group::kMeasurement));
}

}  // namespace cnnscale
