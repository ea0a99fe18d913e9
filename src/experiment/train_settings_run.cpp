// How `cnnscale train` runs its steps on a device, and how it measures them: the entries of train's
// settings table (train_settings.hpp) in the experiment's section `train`; and its checkpoints, options
// of train alone. How the steps run is
// recorded only where it differs from its default, so that the runs made before it was recorded keep
// their ids, and under the key those runs had (fused_epilogues for train.fuse); how they are measured
// (and fed, and reported) is no part of a run's identity.
#include "experiment/train_settings.hpp"
#include "solver/train_options.hpp"

namespace cnnscale {

namespace {

Setting run_option(Setting s, std::string report_label = "") {
  s.section = "train";
  s.record = Record::NotDefault;
  s.group = option_group::kDeviceStep;
  s.report_label = report_label.empty() ? s.name : std::move(report_label);
  return s;
}

// How the run is measured, fed or reported, not what it computes: no part of its identity
// (Record::Never), so a file passing its flag through extra_args keeps doing so where it gives neither
// its key nor its axis. A key of section `train` and a matrix axis; the report groups a sweep's runs
// by the value the sweep tags each with (sweep_command.cpp).
Setting measure_option(Setting s, std::string unit, CliCheck check = CliCheck::Later) {
  s.section = "train";
  s.unit = std::move(unit);
  s.cli_check = check;
  s.report_label = s.name;
  s.group = option_group::kMeasurement;
  return s;
}

// A count the command line checks as it parses it ("--display: must be at least 1, got 0").
Setting count(std::string name, int64_t def, std::string help, int64_t min, std::string unit) {
  return measure_option(integer_setting(std::move(name), def, std::move(help), static_cast<double>(min), 1e15),
                        std::move(unit), CliCheck::AtLeast);
}

}  // namespace

void add_run_settings(SettingTable& all) {
  all.push_back(run_option(switch_setting(
      "cuda_graph", true,
      "Queue every training step op by op instead of replaying it from a CUDA graph captured after the first step "
      "(the default where the GPU step allows it; the results record which)",
      "--no-graph")));
  {
    // Copies of the captured step exist only where an NCCL job replays it (the Trainer's capture with
    // a step callback): elsewhere the value changes nothing and is not recorded.
    Setting s = run_option(integer_setting(
        "graph_copies", 1,
        "NCCL jobs of 2 or more GPU ranks, or of one with --one-rank-exchange (ignored otherwise): copies of the "
        "captured step, i.e. how many steps the host may queue ahead of the device (1: a step is launched once the "
        "one before has ended; more were slower on an H200: docs/measurements/2026-11-26-scaling-four-gpus.md)",
        1, TrainOptions::kMaxGraphCopies));
    s.cli_check = CliCheck::Range;
    s.applies = [](const RunContext& c) { return c.exchanges && c.graph; };
    all.push_back(std::move(s));
  }
  all.push_back(run_option(switch_setting(
      "phase_marks", true,
      "Time forward, backward and update as one phase (reported under update) instead of marking each: measures "
      "what the per-phase marks themselves cost",
      "--no-phase-marks")));
  all.back().group = option_group::kMeasurement;
  {
    Setting s = run_option(switch_setting(
        "fuse", true,
        "Run every layer as written instead of fusing each batch norm's following ReLU and residual sum, and each "
        "convolution's following ReLU, into it (the default: the same function, fewer passes over memory)",
        "--no-fuse"));
    s.record_key = "fused_epilogues";  // as runs before the table recorded it
    all.push_back(std::move(s));
  }
  all.push_back(run_option(choice_setting(
      "conv_search", "all",
      "GPU convolution algorithms each shape's search times: all (cuDNN's legacy algorithms, its graph-API engines, "
      "the lowered im2col + GEMM form and, for a first convolution, the form lowered by width, an (R x 1) "
      "convolution over S*C channels; the fastest runs), legacy (the legacy algorithms only, to compare) or "
      "no-width (all but the width-lowered form, to compare)",
      {"all", "legacy", "no-width"})));
  all.push_back(run_option(choice_setting(
      "layout", "auto",
      "Memory order of 4-d activations and filters: auto (channels-last on a GPU in bf16, fp16 and tf32, NCHW "
      "otherwise), or nchw / nhwc forced (nhwc on a GPU only), to measure what it costs",
      {"auto", "nchw", "nhwc"})));
  all.back().gpu_only = [](const nlohmann::json& v) { return v == "nhwc"; };  // the CPU backend computes in NCHW
  {
    Setting s = run_option(choice_setting(
        "batchnorm", "auto",
        "Kernels of channels-last training batch norm on a GPU: auto (cuDNN's persistent ones on a whole GPU, "
        "cnnscale's own on an SM partition, where cuDNN's fail or crawl), cudnn or cnnscale everywhere, to compare "
        "them",
        {"auto", "cudnn", "cnnscale"}));
    s.applies = [](const RunContext& c) { return c.gpu; };  // train refuses another choice for a CPU run
    s.gpu_only = [](const nlohmann::json& v) { return v != "auto"; };
    all.push_back(std::move(s));
  }
  all.push_back(run_option(switch_setting(
      "deterministic", false,
      "GPU: deterministic algorithms only, chosen by cuDNN's heuristics rather than by timing, so that every process "
      "chooses alike and a run resumed from a checkpoint continues bit for bit (convolutions then choose among "
      "cuDNN's legacy algorithms); usually slower. Recorded in the run configuration",
      "--deterministic")));
  {
    Setting s = run_option(switch_setting(
        "host_decode", false,
        "GPU runs over byte-stored data (Fashion-MNIST, hdf5:DIR, list:FILE): normalise and augment on the host and "
        "upload floats, instead of uploading the bytes (a quarter as many) and decoding them on the GPU",
        "--host-decode"));
    s.applies = [](const RunContext& c) { return c.gpu; };  // train refuses it for a CPU run
    s.gpu_only = [](const nlohmann::json& v) { return v == true; };
    all.push_back(std::move(s));
  }
  // The augmentation of the training batches: recorded together, as runs always recorded them, in one
  // description (run_config.augment, AugmentOptions::describe), and only where either is on. Before
  // they were keys, an experiment passed their flags in extra_args: it still may.
  {
    Setting s = run_option(integer_setting(
        "crop_pad", 0,
        "Augmentation: shift each training sample by up to N pixels on each axis (a random crop of the zero-padded "
        "sample; the study's +-5-pixel displacements), drawn per sample from the seed and epoch",
        0, 1 << 20));
    s.cli_check = CliCheck::AtLeast;
    s.unit = "pixels";
    s.record = Record::Described;
    s.record_key = "augment";
    s.extra_arg_before = true;
    s.group = option_group::kEpochsData;
    all.push_back(std::move(s));
  }
  {
    Setting s = run_option(switch_setting(
        "mirror", false, "Augmentation: flip each training sample left-right with probability 1/2 (drawn as --crop-pad)",
        "--mirror"));
    s.record = Record::Described;
    s.record_key = "augment";
    s.extra_arg_before = true;
    s.group = option_group::kEpochsData;
    all.push_back(std::move(s));
  }
  const TrainOptions options;
  all.push_back(count("timing_warmup", options.timing_warmup, "Iterations left out of samples/s", 0, "iterations"));
}

void add_checkpoint_settings(SettingTable& all) {
  // A run's own files: options of train alone, no experiment keys (Setting::no_key), never recorded.
  const char* const files =
      "it names a run's own checkpoint folder or file, which the runs of a sweep, each given the same value, would "
      "share (a second run refuses a folder another holds)";
  all.push_back([&] {
    Setting s = text_setting("checkpoint_dir", "",
                             "Write checkpoints here (the newest two intact ones are kept); the directory belongs to "
                             "this run: another live run, or a run of other settings while these checkpoints are "
                             "there, is refused");
    s.no_key = files;
    s.group = option_group::kCheckpoints;
    return s;
  }());
  all.push_back([&] {
    Setting s = integer_setting("checkpoint_every", 0, "Also checkpoint every N iterations (always at epoch ends)", 0,
                                1e15);
    s.cli_check = CliCheck::AtLeast;
    s.unit = "iterations";
    s.no_key = "it acts only with --checkpoint-dir, a run's own folder, and changes how often a run saves, not what "
               "it trains";
    s.group = option_group::kCheckpoints;
    return s;
  }());
  all.push_back([&] {
    Setting s = text_setting("resume", "",
                             "Continue from a checkpoint file, or 'auto': the newest intact one in --checkpoint-dir "
                             "(its network, solver settings and data must be this run's)");
    s.no_key = files;
    s.group = option_group::kCheckpoints;
    return s;
  }());
  all.push_back([&] {
    Setting s = switch_setting("resume_allow_changes", false,
                               "With --resume: continue even where the checkpoint's network, solver settings or data "
                               "differ from this run's (fine-tuning; each difference is logged), and take over a "
                               "--checkpoint-dir that holds another run's checkpoints",
                               "--resume-allow-changes");
    s.no_key = "it acts only with --resume";
    s.group = option_group::kCheckpoints;
    return s;
  }());
}

void add_measure_settings(SettingTable& all) {
  const TrainOptions options;
  const TrainMeasurement measurement;
  all.push_back(count("display", options.display, "Iterations between loss reports", 1, "iterations"));
  all.push_back(count("data_threads", options.data_threads,
                      "Threads filling each training batch (reading, checking, normalising a contiguous part each); "
                      "the batches do not depend on it, so it is not part of the run's identity",
                      1, "threads"));
  all.back().group = option_group::kEpochsData;
  // 0, the default, is the rank's training batch: no value to give, so --help shows none.
  all.push_back(
      count("test_batch", options.test_batch, "Test batch size per rank (default: the rank's batch)", 1, "samples"));
  all.back().group = option_group::kEpochsData;
  all.push_back(
      count("pool_batches", options.pool_batches, "Synthetic: distinct batches kept on the device", 1, "batches"));
  all.back().group = option_group::kEpochsData;
  // Checked by validate_measure_args, whose words runs have been refused with: "--power-hz must be in [0, 1000]".
  all.push_back(
      measure_option(number_setting("power_hz", 10.0, "Power sampling rate per GPU (0: no sampler)", 0, 1000), "Hz"));
  all.push_back(
      measure_option(number_setting("min_window", measurement.min_window_seconds,
                                    "Shortest steady energy window in seconds (extended if shorter)", 0, 1e15),
                     "seconds"));
  // The phase-isolated loops run under --measure phases only; the matmul peak's window with --mfu only.
  auto phases = [](const RunContext& c) { return c.measure == "phases"; };
  all.push_back(measure_option(number_setting("phase_window", measurement.phase_window_seconds,
                                              "measure phases: shortest loop in seconds", 0, 1e15, true),
                               "seconds"));
  all.back().applies = phases;
  all.push_back(measure_option(integer_setting("phase_repeats", measurement.phase_repeats,
                                               "measure phases: repeats of the three loops", 1, 1e15),
                               ""));
  all.back().applies = phases;
  all.push_back(measure_option(
      switch_setting("mfu", false,
                     "After training, measure the device's square-matmul peak in the run's precision (8192^3 on a GPU, "
                     "1024^3 on the CPU) and report model FLOPs utilisation: gflops over that peak",
                     "--mfu"),
      ""));
  all.push_back(
      measure_option(number_setting("mfu_window", 0.2,
                                    "--mfu: shortest window of the matmul peak in seconds (3 windows)", 0, 3600, true),
                     "seconds"));
  all.back().applies = [](const RunContext& c) { return c.mfu; };
}

}  // namespace cnnscale
