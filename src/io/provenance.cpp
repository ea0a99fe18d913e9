// Provenance (provenance.hpp): capturing it, and its JSON, run.h5 and CSV forms.
#include "io/provenance.hpp"

#include "core/host_name.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "core/build_info.hpp"
#include "core/error.hpp"

namespace cnnscale {

namespace {

std::vector<std::string>& command_line_store() {
  static std::vector<std::string> words;
  return words;
}

std::string json_string(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw_config("{}: provenance.{} is missing", where, key);
  if (!it->is_string()) throw_config("{}: provenance.{} is {}, expected a string", where, key, it->type_name());
  return it->get<std::string>();
}

std::vector<std::string> json_strings(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw_config("{}: provenance.{} is missing", where, key);
  if (!it->is_array()) throw_config("{}: provenance.{} is {}, expected an array of strings", where, key, it->type_name());
  std::vector<std::string> out;
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string())
      throw_config("{}: provenance.{}[{}] is {}, expected a string", where, key, i, (*it)[i].type_name());
    out.push_back((*it)[i].get<std::string>());
  }
  return out;
}

}  // namespace

void record_command_line(int argc, const char* const* argv) {
  command_line_store().assign(argv, argv + argc);
}

const std::vector<std::string>& recorded_command_line() { return command_line_store(); }

std::string utc_iso(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char iso[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return iso;
}

Provenance start_provenance() {
  Provenance p;
  p.version = std::string(cnnscale_version());
  p.git_describe = std::string(cnnscale_git_describe());
  p.command_line = recorded_command_line();
  p.start_time = utc_iso(std::chrono::system_clock::now());
  p.hosts = {host_name()};
  return p;
}

void set_end(Provenance& p) { p.end_time = utc_iso(std::chrono::system_clock::now()); }

Provenance resumed_provenance(Provenance mine, const std::optional<Provenance>& before) {
  const std::string resumed = mine.start_time;
  if (before) {
    mine.start_time = before->start_time;
    mine.resumed_at = before->resumed_at;
  }
  mine.resumed_at.push_back(resumed);
  return mine;
}

std::vector<std::string> distinct_hosts(const std::vector<std::string>& rank_hosts) {
  std::vector<std::string> out;
  for (const std::string& h : rank_hosts)
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  return out;
}

std::string shell_line(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& w : words) {
    if (!line.empty()) line += ' ';
    const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](unsigned char c) {
      return std::isalnum(c) || std::string_view("_./:=,+@%-").find(static_cast<char>(c)) != std::string_view::npos;
    });
    if (plain) {
      line += w;
      continue;
    }
    line += '\'';
    for (char c : w) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

nlohmann::json provenance_json(const Provenance& p) {
  using nlohmann::json;
  return {{"version", p.version},
          {"git_describe", p.git_describe.empty() ? json(nullptr) : json(p.git_describe)},
          {"command_line", p.command_line},
          {"start_time", p.start_time},
          {"end_time", p.end_time},
          {"hosts", p.hosts},
          {"resumed_at", p.resumed_at}};
}

Provenance provenance_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw_config("{}: provenance is {}, expected an object", where, j.type_name());
  Provenance p;
  p.version = json_string(j, "version", where);
  if (const auto it = j.find("git_describe"); it != j.end() && !it->is_null())
    p.git_describe = json_string(j, "git_describe", where);
  p.command_line = json_strings(j, "command_line", where);
  p.start_time = json_string(j, "start_time", where);
  p.end_time = json_string(j, "end_time", where);
  p.hosts = json_strings(j, "hosts", where);
  // Absent from files written before it was recorded: never resumed, as far as they say.
  if (j.contains("resumed_at")) p.resumed_at = json_strings(j, "resumed_at", where);
  return p;
}

void write_provenance_h5(h5::Writer& w, const std::string& group, const Provenance& p) {
  h5::Handle g = w.group(group);
  w.attr_str(g.get(), "version", p.version);
  w.attr_str(g.get(), "git_describe",
             p.git_describe.empty() ? std::nullopt : std::optional<std::string>(p.git_describe));
  w.attr_str(g.get(), "start_time", p.start_time);
  w.attr_str(g.get(), "end_time", p.end_time);
  w.strings(g.get(), "command_line", p.command_line);
  w.strings(g.get(), "hosts", p.hosts);
  w.strings(g.get(), "resumed_at", p.resumed_at);
}

std::optional<Provenance> read_provenance_h5(const h5::Reader& in, const std::string& group) {
  if (!in.exists(in.root(), group)) return std::nullopt;
  h5::Handle g = in.group(in.root(), group);
  const auto required = [&](const char* name) {
    std::optional<std::string> v = in.attr_str(g.get(), name);
    if (!v) throw_config("{}: {}/{} is null", in.path(), group, name);
    return *v;
  };
  Provenance p;
  p.version = required("version");
  p.git_describe = in.attr_str(g.get(), "git_describe").value_or("");
  p.start_time = required("start_time");
  p.end_time = required("end_time");
  p.command_line = in.strings(g.get(), "command_line");
  p.hosts = in.strings(g.get(), "hosts");
  // Absent from files written before it was recorded: never resumed, as far as they say.
  if (in.exists(g.get(), "resumed_at")) p.resumed_at = in.strings(g.get(), "resumed_at");
  return p;
}

std::vector<std::pair<std::string, std::string>> provenance_columns(const Provenance& p) {
  return {{"version", p.version},
          {"git_describe", p.git_describe},
          {"command_line", shell_line(p.command_line)},
          {"start_time", p.start_time},
          {"end_time", p.end_time},
          {"hosts", fmt::format("{}", fmt::join(p.hosts, ","))},
          {"resumed_at", fmt::format("{}", fmt::join(p.resumed_at, ","))}};
}

}  // namespace cnnscale
