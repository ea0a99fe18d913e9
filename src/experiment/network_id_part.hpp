// A network's part of a run id (experiment_expand.cpp), which --only also matches (experiment_only.cpp).
#pragma once
#include <string>

namespace cnnscale {

// The file stem for a path, characters outside [A-Za-z0-9_] as '_'.
std::string network_id_part(const std::string& network);

}  // namespace cnnscale
