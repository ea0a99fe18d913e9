// How a data-parallel `cnnscale train` job exchanges its gradients and divides its batch: the entries of
// train's settings table (train_settings.hpp) that are fields of the experiment's matrix.allreduce
// modes, and the split, matrix.split. Most apply only where gradients are exchanged (a job of 2+
// ranks, or one with --one-rank-exchange): one process has no allreduce for them to change. Each is
// recorded as the runs before the table recorded it, under the key they had, so that those runs keep
// their ids: only where it differs from its default, where it applies. A mode's label in the run ids
// (ov-compute-gather) and its form in the hashed configuration are made from these entries too
// (id_words, id_prefix, id_absent), spelt as before the table so that the sweep's run ids stay.
//
// The rank sets (--gpus, --sm-counts, --slowdown) and the batch: train_settings_ranks.cpp. The other
// data-parallel option, --one-rank-exchange, is an entry of train alone (no experiment key): a job the
// sweep never launches.
#include "core/precision.hpp"
#include "experiment/train_settings.hpp"
#include "net/gradient_plan.hpp"  // kDefaultBucketBytes
#include "parallel/split_policy.hpp"

namespace cnnscale {

namespace {

// A Boolean: true|false on the command line.
Setting entry_bool(std::string name, bool def, std::string help) {
  Setting s = switch_setting(std::move(name), def, std::move(help), "");
  s.type = SettingType::Boolean;
  return s;
}

Setting exchange_option(Setting s, std::string flag, std::string record_key) {
  s.part_of = "allreduce";
  s.flag = std::move(flag);
  s.record_key = std::move(record_key);
  s.record = Record::NotDefault;
  s.group = option_group::kDataParallel;
  s.applies = [](const RunContext& c) { return c.exchanges; };
  return s;
}

// A setting of the job in the experiment's section `train`, not part of the run's identity unless the
// caller says so (how the job is run, not what it computes).
// A key of section `train` and a matrix axis; the report groups runs by it (a run of a sweep that set
// one recorded Never has it as a tag: sweep_command.cpp).
Setting job_option(Setting s, std::string unit = "") {
  s.section = "train";
  s.unit = std::move(unit);
  s.group = option_group::kDataParallel;
  s.report_label = s.name;
  return s;
}

}  // namespace

void add_parallel_settings(SettingTable& all) {
  {
    // Not recorded in the run's configuration (the sweep's allreduce tag and the results' figures name it).
    Setting s = exchange_option(
        entry_bool("overlap", true,
                   "Overlap bucket allreduces with backward (false, or --no-overlap: one allreduce after backward "
                   "instead of buckets during it): true|false"), "--allreduce-overlap", "");
    s.record = Record::Never;
    s.false_flag = "--no-overlap";
    s.report_label = "allreduce_overlap";
    // The mode's label starts with it, given or not; the hashed mode always names it.
    s.id_words = {{"true", "ov"}, {"false", "noov"}};
    s.id_long_words = {{"true", "overlap"}, {"false", "no-overlap"}};
    s.id_absent = true;
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(choice_setting("algo", "ring", "NCCL algorithm: ring, tree or auto (MPI ignores it)",
                                               {"ring", "tree", "auto"}),
                                "--allreduce-algo", "");
    s.record = Record::Never;  // the results name it (allreduce_algo) for the GPU ranks of an NCCL job
    s.applies = [](const RunContext& c) { return c.exchanges && c.gpu; };
    s.report_label = "allreduce_algo";
    s.id_absent = "";  // the hashed mode always names it: "" for train's default
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        choice_setting("dtype", "fp32",
                       "Dtype of the gradient exchange: fp32 (the master gradients, as DDP), bf16 or fp16 (each bucket "
                       "rounded to 16 bits for the exchange: half the bytes), or compute (the --precision's storage: "
                       "bf16/fp16, fp32 for fp32 and tf32). fp16 exchanges the loss-scaled gradients under --precision "
                       "fp16",
                       {"fp32", "bf16", "fp16", "compute"}),
        "--allreduce-dtype", "allreduce_dtype");
    // Recorded as the dtype it resolves to, and on every run, one of one rank too, as the runs before
    // the table had it (there it changes nothing).
    s.applies = nullptr;
    s.resolve = [](const nlohmann::json& value, const RunContext& c) -> nlohmann::json {
      if (value != "compute") return value;
      return float_type_name(compute_dtype(parse_precision(c.precision)));
    };
    s.report_label = "allreduce_dtype";
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        integer_setting("max_ctas", 0,
                        "Most CTAs (SMs) NCCL's allreduce may occupy, as NCCL_MAX_CTAS (an exported one wins): fewer "
                        "leave an overlapped backward more SMs, at some of the exchange's bandwidth. 0: NCCL's "
                        "choice; GPU ranks",
                        0, 64),
        "--allreduce-max-ctas", "allreduce_max_ctas");
    s.cli_check = CliCheck::Range;
    s.id_prefix = "c";  // ov-c8
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        choice_setting("cta_policy", "default",
                       "NCCL's CTA policy for the exchange: efficiency asks for the fewest CTAs that reach decent "
                       "bandwidth (an overlapped backward keeps more SMs), zero for collectives on no CTAs where NCCL "
                       "has them, default NCCL's own (NCCL >= 2.27); GPU ranks",
                       {"default", "efficiency", "zero"}),
        "--allreduce-cta-policy", "allreduce_cta_policy");
    s.id_words = {{"efficiency", "-eff"}};
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        choice_setting("priority", "high",
                       "Priority of the exchange's stream: high starts the collective's blocks before backward's "
                       "pending ones, low the other way round (the exchange's latency traded for compute); GPU ranks",
                       {"high", "low"}),
        "--allreduce-priority", "allreduce_priority");
    s.id_words = {{"low", "-lowp"}};
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        entry_bool("update", true,
                   "Update each gradient bucket's parameters as soon as its allreduce ends (GPU ranks: on a side "
                   "stream, beside the rest of backward) instead of once after the whole exchange; the same "
                   "arithmetic. fp16 runs (whose loss scaling needs every gradient first) update once: true|false"),
        "--update-per-bucket", "update_per_bucket");
    s.choices = {"after_exchange", "per_bucket"};  // the experiment's words for false and true
    s.id_words = {{"false", "-upafter"}};
    all.push_back(std::move(s));
  }
  {
    Setting s = exchange_option(
        entry_bool("gather", false,
                   "Fully-connected layers whose inputs and output gradients are fewer bytes than their weight "
                   "gradients form those from every rank's rows, gathered during backward, instead of allreducing "
                   "them (CaffeNet's fc6 on 4 ranks of 64: 2.6 M values moved instead of 57 M); the same sum in "
                   "another order. Identical, whole GPUs only (each rank computes the job's gradient): true|false"),
        "--gather-gradients", "gather_gradients");
    // One rank has no other rank's rows to gather (--one-rank-exchange): nothing changes.
    s.applies = [](const RunContext& c) { return c.world_size > 1; };
    s.id_words = {{"true", "-gather"}};
    all.push_back(std::move(s));
  }
  {
    Setting s = choice_setting(
        "split", "even",
        "Division of the global batch among ranks: even; manual (--shares); proportional (equal compute time from a "
        "start-up probe); auto (from the same probe, then rebalanced online from measured compute time); energy or "
        "edp (fewest predicted joules or joules x seconds per batch from the same probe, GPU ranks, their time "
        "models then refined online from measured compute time)",
        {"even", "manual", "proportional", "auto", "energy", "edp"});
    s.part_of = "split";  // matrix.split, the axis itself (experiment_matrix.cpp)
    s.record = Record::NotDefault;  // even runs keep their ids
    s.group = option_group::kDataParallel;
    s.report_label = "split";
    // Chosen by each GPU's joules: CPU ranks have no energy reading of their own, and train refuses
    // them there (ParallelRun).
    s.gpu_only = [](const nlohmann::json& v) {
      const std::optional<SplitPolicy> policy = split_policy_named(v.get<std::string>());
      return policy && split_needs_energy(*policy);
    };
    all.push_back(std::move(s));
  }
  // The settings of one split: train refuses them with another, so a sweep writes them only on the
  // runs of that split (Setting::applies_only_to), and an experiment none of whose runs has that split
  // is refused at the key.
  {
    Setting s = job_option(choice_setting("auto_start", "probe",
                                          "--split auto: its first shares: probe (proportional's, from the start-up "
                                          "probe) or even",
                                          {"probe", "even"}));
    s.record = Record::Always;  // on every auto run, as train recorded it before the table
    s.applies = [](const RunContext& c) { return c.split == "auto"; };
    s.applies_only_to = "runs of split auto (matrix.split, 2 or more ranks)";
    all.push_back(std::move(s));
  }
  {
    Setting s = job_option(
        integer_setting("shares", 0, "--split manual: each rank's samples, in rank order, summing to --batch", 1, 1e15),
        "samples");
    s.type = SettingType::IntegerList;  // one per rank; manual_split checks them against the ranks and batch
    s.default_value = nlohmann::json::array();
    // Not recorded (the run records its ranks' batches), nor a tag: the split's figures name each rank's share.
    s.report_label.clear();
    s.applies = [](const RunContext& c) { return c.split == "manual"; };
    s.applies_only_to = "runs of split manual (no matrix.split value: it needs shares per rank)";
    all.push_back(std::move(s));
  }
  // The job's other settings: keys of the experiment's section `train` (and matrix axes), checked by
  // ParallelRun where train uses them.
  {
    Setting s = job_option(integer_setting("rebalance_every", kDefaultRebalanceEvery,
                                           "--split auto, energy, edp: steps between online refinements of the shares "
                                           "(0: keep the start-up shares)",
                                           0, 1e15),
                           "steps");
    // Recorded for the splits that refine online (energy and edp too, so runs from before they did have
    // other ids), wherever the run's split is one; elsewhere it changes nothing.
    s.record = Record::Always;
    s.applies = [](const RunContext& c) {
      const std::optional<SplitPolicy> policy = split_policy_named(c.split);
      return policy && split_refines_online(*policy);
    };
    all.push_back(std::move(s));
  }
  all.push_back(job_option(number_setting(
      "probe_seconds", 0.5,
      "--split proportional/energy/edp (and auto from a probe): seconds of forward+backward timed at each probe "
      "batch (energy and edp, which read the GPU's energy counter: at least --min-window)",
      0, 1e15, true), "seconds"));
  // The runs that probe at start-up (Trainer::probes_split): the splits that always do, and auto of 2 or
  // more ranks starting from the probe (--auto-start even starts from equal shares, without one). train
  // takes it on any run (it checks only its range), so applies_only_to stays "": a fixed value goes on
  // every run, and an axis over it multiplies only the runs that probe.
  all.back().applies = [](const RunContext& c) {
    const std::optional<SplitPolicy> policy = split_policy_named(c.split);
    return policy && (split_needs_probe(*policy) ||
                      (*policy == SplitPolicy::Auto && c.auto_start == "probe" && c.world_size > 1));
  };
  all.push_back(job_option(number_setting("bucket_mb", static_cast<double>(kDefaultBucketBytes) / (1 << 20),
                                          "Gradient bucket size in MiB (allreduce granularity)", 0, 1e15, true),
                           "MiB"));
  all.back().applies = [](const RunContext& c) { return c.exchanges; };  // one process has no buckets
  {
    Setting s = switch_setting(
        "one_rank_exchange", false,
        "A job of one rank (mpirun -np 1) keeps the data-parallel path: communicator, gradient buckets, the exchange "
        "with itself, the update per bucket and the step's graph copies, to measure what that path costs a GPU "
        "against the same GPU alone. By default such a job trains as one process",
        "--one-rank-exchange");
    s.group = option_group::kDataParallel;
    // A configuration of its own where it keeps a one-rank job on that path, as runs always recorded it.
    s.record = Record::NotDefault;
    s.applies = [](const RunContext& c) { return c.exchanges && c.world_size == 1; };
    s.report_label = "one_rank_exchange";  // the report's own key, from the results' summary
    s.no_key = "a sweep's 1-GPU runs are its baselines, which measure the GPU alone: use cnnscale train under "
               "mpirun -np 1 for that measurement";
    all.push_back(std::move(s));
  }
  all.push_back(job_option(number_setting(
      "watchdog_timeout", 300.0,
      "Seconds a rank may block in one operation (allreduce, sync) before the job is ended with exit 3", 0, 1e15,
      true), "seconds"));
}

}  // namespace cnnscale
