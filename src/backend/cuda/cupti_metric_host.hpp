// The host side of CUPTI's range profiler (cupti_profiler_host.h) for cupti_metrics.cpp: the metric
// names of a chip checked and scheduled into a config image, its replay passes, and the decoded
// counter data read back per range. Needs no GPU. Included only where CNNSCALE_HAVE_CUPTI is set.
#pragma once
#include <cupti.h>
#include <cupti_profiler_host.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cnnscale::cuda {

// A CUPTI parameter struct: zeroed, with its size set (CUPTI reads the size to know the version).
template <typename Params>
Params cupti_params(size_t struct_size) {
  Params p{};
  p.structSize = struct_size;
  return p;
}
#define CNNSCALE_CUPTI_PARAMS(type) ::cnnscale::cuda::cupti_params<type>(type##_STRUCT_SIZE)

std::string cupti_text(CUptiResult status);
// Pointers into `names`, for CUPTI's arrays of names; valid while `names` lives unchanged.
std::vector<const char*> c_names(const std::vector<std::string>& names);

// The profiler host object of one chip: metric names, config image, evaluation.
class ProfilerHost {
 public:
  // `availability`: the counter availability image of the context to be profiled (empty: all of the
  // chip's counters, for a host without a GPU). ConfigError for a chip this CUPTI does not know.
  ProfilerHost(const std::string& chip, std::vector<uint8_t> availability);
  ~ProfilerHost();
  ProfilerHost(const ProfilerHost&) = delete;
  ProfilerHost& operator=(const ProfilerHost&) = delete;

  // ConfigError naming every metric the chip does not have: a catalogue name of another GPU
  // generation, or a name typed wrong.
  void check_metrics(const std::vector<std::string>& metrics) const;
  // Schedules `metrics` (once per host object) and returns the config image.
  std::vector<uint8_t> config_image(const std::vector<std::string>& metrics);
  // The values of `metrics` (those of the config image) in range `range` of decoded counter data.
  std::map<std::string, double> evaluate(std::vector<uint8_t>& counter_data, size_t range,
                                         const std::vector<std::string>& metrics) const;

 private:
  std::string chip_;
  // CUPTI keeps the pointer to the availability image and reads it again when metrics are added,
  // so the image lives as long as the host object.
  std::vector<uint8_t> availability_;
  CUpti_Profiler_Host_Object* host_ = nullptr;
};

int64_t passes_of(std::vector<uint8_t>& config_image);
// The number of ranges in decoded counter data, and the name of one.
size_t ranges_in(const std::vector<uint8_t>& counter_data);
std::string range_name(const std::vector<uint8_t>& counter_data, size_t range);

}  // namespace cnnscale::cuda
