// `cnnscale netinfo NET`: per-layer shapes, parameters, forward MACs and bytes, totals and the
// computation-to-communication ratios (definitions in src/net/netinfo.cpp and networks/README.md).
// `cnnscale netinfo --layers`: the network file reference (net/network_reference.hpp), the text of
// docs/network-reference.md's reference part.
#include <iostream>
#include <optional>
#include <vector>

#include "app/commands.hpp"
#include "net/netinfo.hpp"
#include "net/network_reference.hpp"

namespace cnnscale::app {

namespace {

struct NetinfoArgs {
  std::string network;
  bool json = false;
  bool layers = false;
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
  int64_t batch = 1;
  std::string counting = "ours";
};

}  // namespace

void register_netinfo(CLI::App& app) {
  auto args = std::make_shared<NetinfoArgs>();
  CLI::App* cmd = app.add_subcommand("netinfo", "Per-layer shapes, parameters, MACs and bytes (Castro et al., Table 1)");
  CLI::Option* network =
      cmd->add_option("network", args->network, "network file or name (caffenet -> networks/caffenet.yaml)");
  CLI::Option* json = cmd->add_flag("--json", args->json, "print one JSON object instead of the table");
  cmd->add_flag("--layers", args->layers,
                "print the network file reference instead: every layer type and the keys a network file, a "
                "block, a repeat and each layer accept (Markdown; docs/network-reference.md)")
      ->excludes(network)
      ->excludes(json);
  cmd->add_option("--input-shape", args->input_shape, "override the input shape per sample: C,H,W")
      ->delimiter(',')
      ->expected(3);
  cmd->add_option("--classes", args->classes, "override the number of classes")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args->batch, "batch size per rank for the data-parallel ratio")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--counting", args->counting,
                  "ours: forward multiply-accumulates and the bytes the layers move; study: also Castro et al.'s "
                  "Eqs. 1-9 beside them, per layer and in total (the operations of every layer; docs/seeds.md, Table 1)")
      ->check(CLI::IsMember({"ours", "study"}));
  cmd->callback([args] {
    if (args->layers) {
      std::cout << network_reference_markdown();
      return;
    }
    if (args->network.empty()) throw_config("netinfo: give a network file or name, or --layers");
    NetOptions options;
    if (!args->input_shape.empty()) options.input_shape = args->input_shape;
    if (args->classes > 0) options.classes = args->classes;
    NetSpec spec = NetSpec::load(resolve_network_path(args->network), options);
    const Counting counting = args->counting == "study" ? Counting::Study : Counting::Ours;
    if (args->json) {
      std::cout << netinfo_json(spec, args->batch, counting).dump(2) << "\n";
    } else {
      std::cout << netinfo_table(spec, args->batch, counting);
    }
  });
}

}  // namespace cnnscale::app
