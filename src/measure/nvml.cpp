// NVML through dlopen: resolve the few entry points we use, map every NVML error to nullopt, and
// turn any failure to open a GPU into an unavailable reader with one warning.
#include "measure/nvml.hpp"

#include <dlfcn.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace cnnscale::measure {

namespace {
template <typename F>
void resolve(void* handle, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
}
}  // namespace

std::shared_ptr<NvmlLibrary> NvmlLibrary::load(const std::string& library) {
  std::shared_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) {
    const char* why = dlerror();
    throw_runtime("cannot load {}: {}", library, why ? why : "dlopen failed");
  }
  auto& a = lib->api_;
  void* h = lib->handle_;
  resolve(h, "nvmlInit_v2", a.init);
  resolve(h, "nvmlShutdown", a.shutdown);
  resolve(h, "nvmlErrorString", a.error_string);
  resolve(h, "nvmlSystemGetDriverVersion", a.system_get_driver_version);
  resolve(h, "nvmlDeviceGetHandleByUUID", a.device_get_handle_by_uuid);
  resolve(h, "nvmlDeviceGetHandleByIndex_v2", a.device_get_handle_by_index);
  resolve(h, "nvmlDeviceGetTotalEnergyConsumption", a.device_get_total_energy_consumption);
  resolve(h, "nvmlDeviceGetPowerUsage", a.device_get_power_usage);
  resolve(h, "nvmlDeviceGetFieldValues", a.device_get_field_values);
  resolve(h, "nvmlDeviceGetClockInfo", a.device_get_clock_info);
  resolve(h, "nvmlDeviceGetTemperature", a.device_get_temperature);
  resolve(h, "nvmlDeviceGetEnforcedPowerLimit", a.device_get_enforced_power_limit);
  // Without these we cannot even find a device; the rest degrade to nullopt one by one.
  if (!a.init || !a.shutdown || !a.device_get_handle_by_uuid || !a.device_get_handle_by_index)
    throw_runtime("{} lacks nvmlInit_v2/nvmlShutdown/nvmlDeviceGetHandleBy*", library);
  nvml_abi::Return r = a.init();
  if (r != nvml_abi::kSuccess) throw_runtime("nvmlInit_v2 failed: {}", lib->error_string(r));
  lib->initialised_ = true;
  return lib;
}

std::shared_ptr<NvmlLibrary> NvmlLibrary::from_api(const nvml_abi::Api& api) {
  std::shared_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->api_ = api;
  CNNSCALE_CHECK(api.init && api.shutdown, "an NVML table needs init and shutdown");
  nvml_abi::Return r = api.init();
  if (r != nvml_abi::kSuccess) throw_runtime("nvmlInit_v2 failed: {}", lib->error_string(r));
  lib->initialised_ = true;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialised_) api_.shutdown();
  if (handle_) dlclose(handle_);
}

std::string NvmlLibrary::error_string(nvml_abi::Return r) const {
  if (api_.error_string) {
    if (const char* s = api_.error_string(r)) return s;
  }
  return "NVML error " + std::to_string(r);
}

std::optional<std::string> NvmlLibrary::driver_version() const {
  if (!api_.system_get_driver_version) return std::nullopt;
  char buf[96] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
  if (api_.system_get_driver_version(buf, sizeof(buf)) != nvml_abi::kSuccess) return std::nullopt;
  return std::string(buf);
}

NvmlGpuReader::NvmlGpuReader(std::shared_ptr<NvmlLibrary> lib, nvml_abi::Device device, std::string id)
    : lib_(std::move(lib)), device_(device), id_(std::move(id)) {}

std::optional<std::uint64_t> NvmlGpuReader::energy_mj() {
  const auto& a = lib_->api();
  unsigned long long mj = 0;
  if (!a.device_get_total_energy_consumption ||
      a.device_get_total_energy_consumption(device_, &mj) != nvml_abi::kSuccess)
    return std::nullopt;
  return static_cast<std::uint64_t>(mj);
}

std::optional<double> NvmlGpuReader::field_milliwatts(unsigned field_id) {
  const auto& a = lib_->api();
  if (!a.device_get_field_values) return std::nullopt;
  nvml_abi::FieldValue v{};
  v.fieldId = field_id;
  if (a.device_get_field_values(device_, 1, &v) != nvml_abi::kSuccess) return std::nullopt;
  if (v.nvmlReturn != nvml_abi::kSuccess) return std::nullopt;
  // The driver says which member of the union it filled; power fields are usually unsigned int.
  switch (v.valueType) {
    case nvml_abi::kDouble:
      return v.value.dVal;
    case nvml_abi::kUnsignedInt:
      return static_cast<double>(v.value.uiVal);
    case nvml_abi::kUnsignedLong:
      return static_cast<double>(v.value.ulVal);
    case nvml_abi::kUnsignedLongLong:
      return static_cast<double>(v.value.ullVal);
    case nvml_abi::kSignedLongLong:
      return static_cast<double>(v.value.sllVal);
    case nvml_abi::kSignedInt:
      return static_cast<double>(v.value.siVal);
    case nvml_abi::kUnsignedShort:
      return static_cast<double>(v.value.usVal);
  }
  return std::nullopt;
}

std::optional<double> NvmlGpuReader::power_w() {
  if (auto mw = field_milliwatts(nvml_abi::kFieldPowerInstant)) return *mw / 1000.0;
  const auto& a = lib_->api();
  unsigned mw = 0;
  if (!a.device_get_power_usage || a.device_get_power_usage(device_, &mw) != nvml_abi::kSuccess) return std::nullopt;
  return mw / 1000.0;
}

std::optional<double> NvmlGpuReader::average_power_w() {
  if (auto mw = field_milliwatts(nvml_abi::kFieldPowerAverage)) return *mw / 1000.0;
  return std::nullopt;
}

std::optional<double> NvmlGpuReader::sm_clock_mhz() {
  const auto& a = lib_->api();
  unsigned mhz = 0;
  if (!a.device_get_clock_info || a.device_get_clock_info(device_, nvml_abi::kClockSm, &mhz) != nvml_abi::kSuccess)
    return std::nullopt;
  return static_cast<double>(mhz);
}

std::optional<double> NvmlGpuReader::temperature_c() {
  const auto& a = lib_->api();
  unsigned c = 0;
  if (!a.device_get_temperature ||
      a.device_get_temperature(device_, nvml_abi::kTemperatureGpu, &c) != nvml_abi::kSuccess)
    return std::nullopt;
  return static_cast<double>(c);
}

std::optional<double> NvmlGpuReader::power_limit_w() {
  const auto& a = lib_->api();
  unsigned mw = 0;
  if (!a.device_get_enforced_power_limit || a.device_get_enforced_power_limit(device_, &mw) != nvml_abi::kSuccess)
    return std::nullopt;
  return mw / 1000.0;
}

namespace {
std::unique_ptr<GpuPowerReader> unavailable(const std::string& reason) {
  // The one warning of a run without energy data; the reader itself stays silent afterwards.
  log::warn("GPU energy and power will be null: {}", reason);
  return std::make_unique<UnavailableGpuReader>(reason);
}
}  // namespace

std::unique_ptr<GpuPowerReader> open_gpu_power_reader(std::shared_ptr<NvmlLibrary> lib, const std::string& uuid,
                                                      unsigned index) {
  const auto& a = lib->api();
  nvml_abi::Device dev = nullptr;
  nvml_abi::Return r =
      uuid.empty() ? a.device_get_handle_by_index(index, &dev) : a.device_get_handle_by_uuid(uuid.c_str(), &dev);
  std::string id = uuid.empty() ? "index " + std::to_string(index) : uuid;
  if (r != nvml_abi::kSuccess) return unavailable("NVML has no GPU " + id + ": " + lib->error_string(r));
  return std::make_unique<NvmlGpuReader>(std::move(lib), dev, id);
}

std::unique_ptr<GpuPowerReader> open_gpu_power_reader(const std::string& uuid, unsigned index,
                                                      const std::string& library) {
  std::shared_ptr<NvmlLibrary> lib;
  try {
    lib = NvmlLibrary::load(library);
  } catch (const Error& e) {
    return unavailable(e.what());
  }
  return open_gpu_power_reader(std::move(lib), uuid, index);
}

std::function<std::optional<double>()> energy_joules(std::shared_ptr<GpuPowerReader> reader) {
  if (!reader || !reader->available()) return nullptr;
  return [reader = std::move(reader)]() -> std::optional<double> {
    const std::optional<std::uint64_t> mj = reader->energy_mj();
    if (!mj) return std::nullopt;
    return static_cast<double>(*mj) * 1e-3;
  };
}

}  // namespace cnnscale::measure
