// The batch and the rank sets of `cnnscale train`: entries of train's settings table
// (train_settings.hpp) that are matrix axes the experiment's own code expands and names in the run id
// as a whole (part_of equal to the entry's name, as for the split): matrix.batch (--batch),
// matrix.gpu_mix (--gpus, each entry's SMs --sm-counts) and matrix.cpu_mix (--slowdown). Their options,
// the sweep's command-line words, extra_args' refusals and the recorded configuration come from
// here; each is recorded as the runs before the table recorded it, so that those runs keep their ids.
//
// Not entries: matrix.gpus, a rank count, is the launcher's (mpirun -np, srun --ntasks), no option of
// train; matrix.batch_per_gpu reaches train as the global --batch it makes on each rank set, so that a
// point of both axes is one run. --batch-per-rank is an entry of train alone (no experiment key): an
// experiment's batches are global, and matrix.batch_per_gpu gives a batch per GPU.
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

// A list of per-rank values: empty by default, given as the axis entry's values.
Setting rank_list(std::string name, SettingType type, std::string flag, std::string help, double min, double max) {
  Setting s;
  s.name = std::move(name);
  s.type = type;
  s.default_value = nlohmann::json::array();
  s.flag = std::move(flag);
  s.help = std::move(help);
  s.min = min;
  s.max = max;
  s.group = option_group::kDataParallel;
  return s;
}

}  // namespace

void add_rank_settings(SettingTable& all) {
  {
    Setting s = integer_setting("batch", 64, "Batch size: the global batch, split across MPI ranks (see --batch-per-rank)",
                                1, 1 << 24);
    s.part_of = "batch";  // matrix.batch, the axis itself (experiment_parse.cpp)
    // Always, as the job's global batch: --batch-per-rank's is the ranks x --batch.
    s.record = Record::Always;
    s.resolve = [](const nlohmann::json&, const RunContext& c) -> nlohmann::json { return c.global_batch; };
    s.report_label = "global_batch";
    s.group = option_group::kEpochsData;
    all.push_back(std::move(s));
  }
  {
    Setting s = switch_setting("batch_per_rank", false,
                               "--batch is per rank (Caffe's semantics; global batch = ranks x batch) instead of global",
                               "--batch-per-rank");
    s.group = option_group::kDataParallel;
    // Not recorded: the run records the global batch it makes (batch), and its results say it.
    s.no_key = "an experiment's batches are global (matrix.batch), and matrix.batch_per_gpu gives a batch per GPU "
               "as the global batch it makes on each rank set";
    all.push_back(std::move(s));
  }
  {
    // Not recorded: the sweep's tag (gpu_mix) and the results' GPUs name it.
    Setting s = rank_list("gpu_mix", SettingType::IntegerList, "--gpus",
                          "GPU of each node-local rank, comma separated (default: GPU = node-local rank)", 0, 4095);
    s.part_of = "gpu_mix";  // matrix.gpu_mix, the axis itself (experiment_matrix.cpp)
    all.push_back(std::move(s));
  }
  {
    Setting s = rank_list("sms", SettingType::IntegerList, "--sm-counts",
                          "SMs of each node-local rank's GPU partition, comma separated like --gpus (a green context; "
                          "the driver may round up; default: whole GPUs)",
                          1, 1024);
    s.part_of = "gpu_mix";  // each rank's sms of a matrix.gpu_mix entry ({gpu: 0, sms: 66})
    s.record = Record::NotDefault;  // GPU partitions, as asked; whole GPUs keep their ids
    s.record_key = "sm_counts";
    s.report_label = "mix";  // the SMs each rank was granted
    all.push_back(std::move(s));
  }
  {
    Setting s = rank_list("cpu_mix", SettingType::NumberList, "--slowdown",
                          "Emulated unequal CPU ranks: each rank's straggler factor (>= 1, one per rank): it idles "
                          "(factor - 1) x its forward and backward time. Recorded as emulation in the results",
                          1, 1000);
    s.part_of = "cpu_mix";  // matrix.cpu_mix, the axis itself (experiment_matrix.cpp)
    s.record = Record::NotDefault;  // emulation, by rank; equal ranks keep their ids
    s.record_key = "slowdown";
    s.report_label = "mix";  // "slowdown 1+3"
    all.push_back(std::move(s));
  }
}

}  // namespace cnnscale
