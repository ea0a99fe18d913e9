// How a data-parallel `cnnscale train` job exchanges its gradients: the entries of train's settings
// table (train_settings.hpp) that are fields of the experiment's matrix.allreduce modes. Each applies
// only where gradients are exchanged (a job of 2+ ranks, or one with --one-rank-exchange): one process
// has no allreduce for them to change. Each is recorded only where it differs from its default, under
// the key the runs before the table had, so that those runs keep their ids.
//
// The other data-parallel options are not entries yet: their recorded forms are not the values given
// (--update-per-bucket and --gather-gradients take true|false and record a boolean, --allreduce-dtype
// records the dtype `compute` resolves to), or whether they are recorded depends on another option's
// value rather than on the run (--rebalance-every and --auto-start on --split), or their experiment
// form is a compound axis of several options (matrix.gpu_mix: --gpus and --sm-counts; matrix.cpu_mix:
// --slowdown; matrix.allreduce: overlap, algo, dtype, update, gather), which the run id names as a whole.
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

Setting exchange_option(Setting s, std::string flag, std::string record_key) {
  s.part_of = "allreduce";
  s.flag = std::move(flag);
  s.record_key = std::move(record_key);
  s.record = Record::NotDefault;
  s.group = "Data parallel (under mpirun/srun)";
  s.applies = [](const RunContext& c) { return c.exchanges; };
  return s;
}

}  // namespace

void add_parallel_settings(SettingTable& all) {
  {
    Setting s = exchange_option(
        integer_setting("max_ctas", 0,
                        "Most CTAs (SMs) NCCL's allreduce may occupy, as NCCL_MAX_CTAS (an exported one wins): fewer "
                        "leave an overlapped backward more SMs, at some of the exchange's bandwidth. 0: NCCL's "
                        "choice; GPU ranks",
                        0, 64),
        "--allreduce-max-ctas", "allreduce_max_ctas");
    s.cli_check = CliCheck::Range;
    all.push_back(std::move(s));
  }
  all.push_back(exchange_option(
      choice_setting("cta_policy", "default",
                     "NCCL's CTA policy for the exchange: efficiency asks for the fewest CTAs that reach decent "
                     "bandwidth (an overlapped backward keeps more SMs), zero for collectives on no CTAs where NCCL "
                     "has them, default NCCL's own (NCCL >= 2.27); GPU ranks",
                     {"default", "efficiency", "zero"}),
      "--allreduce-cta-policy", "allreduce_cta_policy"));
  all.push_back(exchange_option(
      choice_setting("priority", "high",
                     "Priority of the exchange's stream: high starts the collective's blocks before backward's "
                     "pending ones, low the other way round (the exchange's latency traded for compute); GPU ranks",
                     {"high", "low"}),
      "--allreduce-priority", "allreduce_priority"));
}

}  // namespace cnnscale
