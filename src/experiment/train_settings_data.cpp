// The data set `cnnscale train` trains on: the entries of train's settings table (train_settings.hpp)
// in the experiment's section `dataset`, in the order a run's command line gives them. Each is
// recorded as runs always recorded it: the data's name under `data`, the training samples the run
// opened, and for synthetic data its fill and the network's input shape and classes as they resolved;
// where the files are (data_dir) and the test samples are not recorded (a sweep's run ids cover them:
// its configuration holds the whole dataset section, DatasetSpec::to_json).
#include <fmt/ranges.h>

#include "data/datasets.hpp"
#include "data/fashion_mnist.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale {

namespace {

Setting data_setting(Setting s) {
  s.section = "dataset";
  s.group = option_group::kEpochsData;
  return s;
}

bool synthetic(const RunContext& c) {
  return c.synthetic;
}

}  // namespace

void add_data_settings(SettingTable& all) {
  {
    // The name's own checks need the data sets (dataset_name_error, and an experiment's hdf5: and
    // list: paths resolved against its file): train adds them to its option, the experiment reads the
    // key itself (experiment_dataset.cpp).
    Setting s = data_setting(text_setting(
        "name", "",
        fmt::format("Training data: {}, hdf5:DIR (a shard folder of cnnscale data), or "
                    "list:FILE?size=HxW[&fit=crop|warp][&channels=3|1][&test=FILE][&root=DIR][&classes=N] (an image "
                    "list decoded with OpenCV as it is read)",
                    fmt::join(dataset_names(), ", "))));
    s.flag = "--data";
    s.record = Record::Always;
    s.record_key = "data";
    s.report_label = "data";  // the report's own key: the data set's name in the summary
    s.no_axis =
        "the data set decides which of its keys apply and the input the networks must be written for: one "
        "experiment per data set, or a network's own data (networks.<net>.dataset)";
    all.push_back(std::move(s));
  }
  {
    Setting s = data_setting(
        text_setting("data_dir", FashionMnistDataset::kDefaultDir, "Fashion-MNIST directory (IDX .gz files)"));
    s.no_axis = "it names where the files are, not what a run trains on: one folder per experiment";
    all.push_back(std::move(s));
  }
  {
    // 0: not given (the whole set; synthetic data max(1024, batch)), recorded as the size opened.
    Setting s = data_setting(integer_setting(
        "train_samples", 0,
        "Use only the first N training samples (synthetic: samples per epoch, default max(1024, batch))", 1,
        double(int64_t(1) << 40)));
    s.cli_check = CliCheck::AtLeast;
    s.record = Record::Always;
    s.resolve = [](const nlohmann::json&, const RunContext& c) -> nlohmann::json { return c.train_samples; };
    s.report_label = s.name;
    s.unit = "samples";
    s.report_text = [](const nlohmann::json& value, const nlohmann::json& run_config) -> std::string {
      // The size a run of a named data set chose itself, for its global batch: no size of its own.
      const std::string data = run_config.value("data", std::string());
      const int64_t batch = run_config.value("batch", int64_t(0));
      for (const DatasetInfo& info : dataset_infos())
        if (info.name == data && value.is_number_integer() && value.get<int64_t>() == epoch_samples(info, 0, batch))
          return "default";
      return value.dump();
    };
    all.push_back(std::move(s));
  }
  {
    // -1: not given (the whole test set).
    Setting s = data_setting(integer_setting("test_samples", -1, "Use only the first N test samples (0: no test)", 0,
                                             double(int64_t(1) << 40)));
    s.cli_check = CliCheck::AtLeast;
    s.no_axis =
        "it sets how many test samples the accuracy is measured on, not what a run trains or times, and train does "
        "not record it: one value per experiment";
    all.push_back(std::move(s));
  }
  {
    Setting s = data_setting(choice_setting("synthetic_fill", "gaussian",
                                            "Synthetic values: gaussian noise or a non-zero constant",
                                            {"gaussian", "constant"}));
    s.record = Record::Always;
    s.applies = synthetic;
    // The report's data key, the data's own name, says the fill: synthetic(constant).
    s.report_label = "data";
    all.push_back(std::move(s));
  }
  {
    // 0: not given (the network's), recorded as the network has it.
    Setting s = data_setting(
        integer_setting("classes", 0, "Synthetic: number of classes (default: the network's)", 1, 1 << 24));
    s.cli_check = CliCheck::AtLeast;
    s.record = Record::Always;
    s.applies = synthetic;
    s.resolve = [](const nlohmann::json&, const RunContext& c) -> nlohmann::json { return c.classes; };
    s.report_label = s.name;
    all.push_back(std::move(s));
  }
  {
    // Empty: not given (the network's), recorded as the network has it. Three extents: checked by
    // train (validate_train_args) and the experiment (experiment_dataset.cpp), each in its own words.
    Setting s = data_setting(
        integer_setting("input_shape", 0, "Synthetic: per-sample input C,H,W (default: the network's)", 1, 1 << 20));
    s.type = SettingType::IntegerList;
    s.default_value = nlohmann::json::array();
    s.record = Record::Always;
    s.applies = synthetic;
    s.resolve = [](const nlohmann::json&, const RunContext& c) -> nlohmann::json { return c.input_shape; };
    s.report_label = s.name;
    all.push_back(std::move(s));
  }
}

}  // namespace cnnscale
