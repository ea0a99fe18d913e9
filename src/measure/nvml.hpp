// GPU power and energy readers: NVML loaded at run time (dlopen, no nvml.h or link dependency) behind
// the GpuPowerReader interface, so that tests inject a fake and hosts without a GPU or driver get an
// "unavailable" reader that answers std::nullopt everywhere after one warning.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace cnnscale::measure {

// What every rank reads from its own GPU. Implementations must be callable from the power sampler
// thread and the training thread at once.
class GpuPowerReader {
 public:
  virtual ~GpuPowerReader() = default;
  virtual bool available() const = 0;
  virtual std::string description() const = 0;  // e.g. "NVML GPU-1234..." or why it is unavailable
  // Total energy since the driver loaded, mJ; a 64-bit counter NVML updates about every 100 ms.
  virtual std::optional<std::uint64_t> energy_mj() = 0;
  // Instant power (W): field NVML_FI_DEV_POWER_INSTANT, else nvmlDeviceGetPowerUsage (which on
  // Ampere and later is itself a 1 s average, hence the field first).
  virtual std::optional<double> power_w() = 0;
  // Power averaged by the driver over 1 s (W): field NVML_FI_DEV_POWER_AVERAGE.
  virtual std::optional<double> average_power_w() = 0;
  virtual std::optional<double> sm_clock_mhz() = 0;
  virtual std::optional<double> temperature_c() = 0;
  virtual std::optional<double> power_limit_w() = 0;  // enforced limit, for /system
  virtual std::optional<std::string> driver_version() { return std::nullopt; }  // "580.65.06"
};

// No NVML or no GPU: nothing to read. Carries the reason for description().
class UnavailableGpuReader final : public GpuPowerReader {
 public:
  explicit UnavailableGpuReader(std::string reason) : reason_(std::move(reason)) {}
  bool available() const override { return false; }
  std::string description() const override { return "unavailable: " + reason_; }
  std::optional<std::uint64_t> energy_mj() override { return std::nullopt; }
  std::optional<double> power_w() override { return std::nullopt; }
  std::optional<double> average_power_w() override { return std::nullopt; }
  std::optional<double> sm_clock_mhz() override { return std::nullopt; }
  std::optional<double> temperature_c() override { return std::nullopt; }
  std::optional<double> power_limit_w() override { return std::nullopt; }

 private:
  std::string reason_;
};

// The subset of the NVML C ABI we use, declared here from NVML's public header (nvml.h) so that
// the build needs no driver package. Layouts must match the driver's exactly.
namespace nvml_abi {
using Return = int;  // nvmlReturn_t; 0 = NVML_SUCCESS
using Device = struct nvmlDevice_st*;
constexpr Return kSuccess = 0;
constexpr unsigned kClockSm = 1;              // NVML_CLOCK_SM
constexpr unsigned kTemperatureGpu = 0;       // NVML_TEMPERATURE_GPU
constexpr unsigned kFieldPowerAverage = 185;  // NVML_FI_DEV_POWER_AVERAGE, mW, Ampere (not GA100)+
constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT, mW
enum ValueType : int {                        // nvmlValueType_t
  kDouble = 0,
  kUnsignedInt = 1,
  kUnsignedLong = 2,
  kUnsignedLongLong = 3,
  kSignedLongLong = 4,
  kSignedInt = 5,
  kUnsignedShort = 6
};
union Value {  // nvmlValue_t
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
};
struct FieldValue {  // nvmlFieldValue_t
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;  // us since 1970
  long long latencyUsec;
  ValueType valueType;
  Return nvmlReturn;
  Value value;
};

// Function pointers resolved with dlsym; optional ones may stay null (older drivers).
struct Api {
  Return (*init)() = nullptr;      // nvmlInit_v2
  Return (*shutdown)() = nullptr;  // nvmlShutdown
  const char* (*error_string)(Return) = nullptr;
  Return (*system_get_driver_version)(char*, unsigned) = nullptr;
  Return (*device_get_handle_by_uuid)(const char*, Device*) = nullptr;
  Return (*device_get_handle_by_index)(unsigned, Device*) = nullptr;                     // _v2
  Return (*device_get_total_energy_consumption)(Device, unsigned long long*) = nullptr;  // mJ
  Return (*device_get_power_usage)(Device, unsigned*) = nullptr;                         // mW
  Return (*device_get_field_values)(Device, int, FieldValue*) = nullptr;
  Return (*device_get_clock_info)(Device, unsigned, unsigned*) = nullptr;   // MHz
  Return (*device_get_temperature)(Device, unsigned, unsigned*) = nullptr;  // C
  Return (*device_get_enforced_power_limit)(Device, unsigned*) = nullptr;   // mW
};
}  // namespace nvml_abi

// A loaded and initialised NVML: dlopen + dlsym + nvmlInit_v2; nvmlShutdown and dlclose on
// destruction. Shared by the readers of one process.
class NvmlLibrary {
 public:
  // Throws RuntimeError naming the library and the failing step (dlopen, a missing required
  // symbol, nvmlInit_v2).
  static std::shared_ptr<NvmlLibrary> load(const std::string& library = "libnvidia-ml.so.1");
  // For tests: an already-resolved function table, no dlopen (handle stays null).
  static std::shared_ptr<NvmlLibrary> from_api(const nvml_abi::Api& api);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const nvml_abi::Api& api() const { return api_; }
  std::string error_string(nvml_abi::Return r) const;
  std::optional<std::string> driver_version() const;

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  nvml_abi::Api api_;
  bool initialised_ = false;
};

// One GPU through NVML. Each getter answers nullopt when NVML reports an error for it (e.g.
// NOT_SUPPORTED on a consumer board); it never throws.
class NvmlGpuReader final : public GpuPowerReader {
 public:
  NvmlGpuReader(std::shared_ptr<NvmlLibrary> lib, nvml_abi::Device device, std::string id);
  bool available() const override { return true; }
  std::string description() const override { return "NVML " + id_; }
  std::optional<std::uint64_t> energy_mj() override;
  std::optional<double> power_w() override;
  std::optional<double> average_power_w() override;
  std::optional<double> sm_clock_mhz() override;
  std::optional<double> temperature_c() override;
  std::optional<double> power_limit_w() override;
  std::optional<std::string> driver_version() override { return lib_->driver_version(); }

 private:
  std::optional<double> field_milliwatts(unsigned field_id);
  std::shared_ptr<NvmlLibrary> lib_;
  nvml_abi::Device device_;
  std::string id_;
};

// The reader for this rank's GPU, by UUID (as CUDA reports it, "GPU-..."), else by NVML index when
// the UUID is empty. Any failure (no library, no GPU, unknown UUID) gives an UnavailableGpuReader
// and exactly one log::warn line saying energy fields will be null; never throws.
std::unique_ptr<GpuPowerReader> open_gpu_power_reader(const std::string& uuid, unsigned index = 0,
                                                      const std::string& library = "libnvidia-ml.so.1");
// Same, on an already loaded library (tests, or several GPUs in one process).
std::unique_ptr<GpuPowerReader> open_gpu_power_reader(std::shared_ptr<NvmlLibrary> lib, const std::string& uuid,
                                                      unsigned index = 0);

// The reader's total-energy counter in joules (nullopt while unreadable), as the benchmarks' power
// windows read it; null when the reader has no GPU to read.
std::function<std::optional<double>()> energy_joules(std::shared_ptr<GpuPowerReader> reader);

}  // namespace cnnscale::measure
