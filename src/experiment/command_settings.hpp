// The settings of every measuring command but train (whose table is train_settings.hpp), each
// command's declared once in a table of the same entries as train's: name, type, default, unit, help,
// CLI flag, experiment key (infer's only: the others are not swept), when it applies and whether it
// is part of the run's identity. Each command's options are made from its table
// (app/setting_options.hpp binds an entry to the field of the command's arguments that holds it),
// and each result states the value of every entry of it (setting_values). infer's table also gives
// the schema of an inference experiment (infer_experiment.cpp), the sweep's infer command lines, the
// recorded configuration of each inference run and the report's grouping of them.
#pragma once
#include <string>
#include <vector>

#include "experiment/settings_table.hpp"

namespace cnnscale {

// `cnnscale infer`, in --help order.
const SettingTable& infer_settings();
// `cnnscale time`.
const SettingTable& time_settings();
// `cnnscale calibrate`.
const SettingTable& calibrate_settings();
// `cnnscale bench allreduce`.
const SettingTable& allreduce_bench_settings();
// `cnnscale bench KIND` of a kernel (gemm, conv, spmm, rnn): the entries and defaults of that kind.
const SettingTable& kernel_bench_settings(const std::string& kind);
// `cnnscale bench data`.
const SettingTable& data_bench_settings();

}  // namespace cnnscale
