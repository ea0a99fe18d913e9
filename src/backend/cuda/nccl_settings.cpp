// NCCL's environment variables set for the next communicator's initialisation (the user's own
// values taking precedence) and the CTA policy's check against the NCCL built with.
#include "backend/cuda/nccl_settings.hpp"

#include <nccl.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "core/log.hpp"

namespace cnnscale::cuda {
namespace {

const char* algo_env_value(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::Ring:
      return "Ring";
    case AllreduceAlgo::Tree:
      return "Tree";
    case AllreduceAlgo::Auto:
      return nullptr;
  }
  return nullptr;
}

// Sets one of NCCL's environment variables for the next communicator's initialisation, where NCCL
// reads it, or unsets it for an empty `wanted`. The user's own value (as found at the first call
// for that name, before cnnscale ever set it) takes precedence: it is how NCCL is tuned by hand,
// and silently overriding it would make such a run measure something else than asked. Returns
// whether `wanted` is what NCCL will see.
bool set_nccl_variable(const char* name, const std::string& wanted) {
  static std::mutex mutex;
  static std::map<std::string, std::optional<std::string>> user_values;
  std::lock_guard lock(mutex);
  auto [it, first] = user_values.try_emplace(name);
  if (first)
    if (const char* v = std::getenv(name)) it->second = v;
  if (it->second) {
    if (!wanted.empty() && *it->second != wanted)
      log::warn("{}={} from the environment takes precedence over the requested {}", name, *it->second, wanted);
    return wanted.empty() || *it->second == wanted;
  }
  if (!wanted.empty())
    setenv(name, wanted.c_str(), 1);
  else
    unsetenv(name);
  return true;
}

}  // namespace

void apply_algo(AllreduceAlgo algo) {
  const char* wanted = algo_env_value(algo);
  set_nccl_variable("NCCL_ALGO", wanted ? wanted : "");
}

// The most CTAs (one per channel) NCCL's collectives may run on, through NCCL_MAX_CTAS as apply_algo
// sets NCCL_ALGO, so that /system nccl_env records it like every other NCCL setting of the run. Why
// a run would lower it: an overlapped allreduce's blocks occupy SMs while backward still computes
// (and spin there while a slower rank is behind); fewer of them leave backward more of the GPU at
// the cost of the exchange's bandwidth. Returns the cap to put in the communicator's config as well
// (NCCL reads the variable once per process, the config for each communicator): 0 for none asked,
// or where the user's exported value stands.
int apply_max_ctas(int max_ctas) {
  const std::string wanted = max_ctas > 0 ? std::to_string(max_ctas) : std::string();
  return set_nccl_variable("NCCL_MAX_CTAS", wanted) && max_ctas > 0 ? max_ctas : 0;
}

// A non-default CTA policy goes into the communicator's config, which has the field from NCCL 2.27 on;
// an older NCCL cannot be asked, and running with its default instead would measure something else.
void check_cta_policy_supported(CtaPolicy policy) {
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0)
  if (policy != CtaPolicy::Default)
    throw_runtime("nccl communicator: CTA policy {} needs NCCL 2.27 or later; cnnscale was built with NCCL {}.{}.{}",
                  to_string(policy), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  (void)policy;
#endif
}

}  // namespace cnnscale::cuda
