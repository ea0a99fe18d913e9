// Checkpoint files through core/hdf5_file (every HDF5 call checked, a failure one Error naming the
// file and the operation), published through io/atomic_file; the newest few kept per folder.
#include "solver/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include "core/hdf5_file.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointFormat = "cnnscale-checkpoint-1";

CheckpointArray read_array(const h5::Reader& r, const std::string& group, const std::string& name) {
  CheckpointArray a;
  a.name = name;
  a.values = r.f32(r.root(), group + "/" + name, a.shape);
  return a;
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointContents& contents) {
  write_atomically_with(path, [&](const std::string& tmp) {
    h5::Writer w(tmp, "checkpoint file");
    const hid_t root = w.root();
    for (const auto& a : contents.weights) w.f32(root, "weights/" + a.name, a.shape, a.values);
    for (const auto& a : contents.history) w.f32(root, "history/" + a.name, a.shape, a.values);
    for (const auto& a : contents.state) w.f32(root, "state/" + a.name, a.shape, a.values);
    const CheckpointMeta& m = contents.meta;
    w.scalar_i64(root, "solver/iteration", m.iteration);
    w.scalar_i64(root, "solver/epoch", m.epoch);
    w.scalar_f64(root, "solver/lr", m.lr);
    w.scalar_f64(root, "solver/grad_scale", m.grad_scale);
    w.scalar_i64(root, "solver/clean_steps", m.clean_steps);
    w.scalar_i64(root, "solver/skipped_steps", m.skipped_steps);
    w.fixed_text(root, "rng/loader_state", m.loader_rng_state);
    w.scalar_i64(root, "rng/loader_epoch", m.loader_epoch);
    w.scalar_i64(root, "rng/loader_position", m.loader_position);
    w.fixed_text(root, "config/run", m.run_config);
    w.fixed_text(root, "config/network", m.network);
    w.fixed_text(root, "format", kCheckpointFormat);
    w.close();
  });
}

CheckpointContents read_checkpoint(const std::string& path) {
  h5::Reader r(path, "checkpoint");
  const hid_t root = r.root();
  if (r.fixed_text(root, "format") != kCheckpointFormat)
    throw_config("{}: unknown checkpoint format '{}'", path, r.fixed_text(root, "format"));
  CheckpointContents c;
  for (const auto& n : r.datasets(root, "weights")) c.weights.push_back(read_array(r, "weights", n));
  for (const auto& n : r.datasets(root, "history")) c.history.push_back(read_array(r, "history", n));
  if (r.exists(root, "state"))
    for (const auto& n : r.datasets(root, "state")) c.state.push_back(read_array(r, "state", n));
  CheckpointMeta& m = c.meta;
  m.iteration = r.scalar_i64(root, "solver/iteration");
  m.epoch = r.scalar_i64(root, "solver/epoch");
  m.lr = r.scalar_f64(root, "solver/lr");
  if (r.exists(root, "solver/grad_scale")) {  // written since fp16 training; older files had no scale
    m.grad_scale = r.scalar_f64(root, "solver/grad_scale");
    m.clean_steps = r.scalar_i64(root, "solver/clean_steps");
    m.skipped_steps = r.scalar_i64(root, "solver/skipped_steps");
  }
  m.loader_rng_state = r.fixed_text(root, "rng/loader_state");
  m.loader_epoch = r.scalar_i64(root, "rng/loader_epoch");
  m.loader_position = r.scalar_i64(root, "rng/loader_position");
  m.run_config = r.fixed_text(root, "config/run");
  m.network = r.fixed_text(root, "config/network");
  return c;
}

namespace {

CheckpointArray download_array(Backend& backend, const std::string& name, const Tensor& t) {
  CheckpointArray a;
  a.name = name;
  a.shape = t.shape().dims();
  a.values.resize(static_cast<size_t>(t.numel()));
  backend.download(t, a.values.data());
  return a;
}

// Uploads `arrays` into `targets` (name -> tensor); both sets of names must be equal.
void upload_arrays(Backend& backend, const std::vector<CheckpointArray>& arrays,
                   const std::vector<std::pair<std::string, Tensor>>& targets, const std::string& file,
                   const std::string& kind) {
  std::map<std::string, const CheckpointArray*> by_name;
  for (const auto& a : arrays) by_name[a.name] = &a;
  for (const auto& [name, tensor] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw_config("{}: checkpoint has no {} for '{}' of the network", file, kind, name);
    Shape s(it->second->shape);
    if (!(s == tensor.shape()))
      throw_config("{}: {} '{}' has shape {} in the checkpoint but {} in the network", file, kind, name, s.to_string(),
                   tensor.shape().to_string());
    backend.upload(it->second->values.data(), tensor);
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw_config("{}: checkpoint has {} '{}' that the network lacks", file, kind, by_name.begin()->first);
}

}  // namespace

CheckpointContents capture_checkpoint(const Net& net, const SgdSolver& solver, CheckpointMeta meta) {
  Backend& backend = net.backend();
  CheckpointContents c;
  c.meta = std::move(meta);
  const auto& params = solver.params();
  for (size_t i = 0; i < params.size(); ++i) {
    c.weights.push_back(download_array(backend, params[i].name, params[i].param->master));
    c.history.push_back(download_array(backend, params[i].name, solver.history()[i]));
  }
  for (const auto& [name, tensor] : net.state()) c.state.push_back(download_array(backend, name, tensor));
  return c;
}

void restore_checkpoint(const CheckpointContents& contents, const std::string& file, Net& net, SgdSolver& solver) {
  Backend& backend = net.backend();
  std::vector<std::pair<std::string, Tensor>> weights, history;
  for (size_t i = 0; i < solver.params().size(); ++i) {
    weights.emplace_back(solver.params()[i].name, solver.params()[i].param->master);
    history.emplace_back(solver.params()[i].name, solver.history()[i]);
  }
  upload_arrays(backend, contents.weights, weights, file, "weights");
  upload_arrays(backend, contents.history, history, file, "momentum history");
  upload_arrays(backend, contents.state, net.state(), file, "state");
  // The host arrays die with `contents`: make sure the uploads have consumed them.
  backend.synchronize();
}

void restore_weights(const CheckpointContents& contents, const std::string& file, Net& net) {
  Backend& backend = net.backend();
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const NamedParam& np : named_params(net)) weights.emplace_back(np.name, np.param->master);
  upload_arrays(backend, contents.weights, weights, file, "weights");
  upload_arrays(backend, contents.state, net.state(), file, "state");
  backend.synchronize();  // the host arrays die with `contents`
}

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  CNNSCALE_CHECK(keep_ >= 1, "keep must be >= 1, got {}", keep_);
}

std::string CheckpointDir::path_for(int64_t iteration) const {
  return (fs::path(dir_) / fmt::format("checkpoint-{:09d}.h5", iteration)).string();
}

std::vector<std::string> CheckpointDir::list() const {
  static const std::regex pattern(R"(checkpoint-(\d+)\.h5)");
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && std::regex_match(name, m, pattern))
      found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> CheckpointDir::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string CheckpointDir::save(const CheckpointContents& contents) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_runtime("{}: cannot create checkpoint directory: {}", dir_, ec.message());
  std::string path = path_for(contents.meta.iteration);
  write_checkpoint(path, contents);
  auto all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) fs::remove(all[i], ec);
  return path;
}

}  // namespace cnnscale
