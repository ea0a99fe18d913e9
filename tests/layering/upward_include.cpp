// Compiled as part of the layers library's include view (tests/CMakeLists.txt): it must NOT
// compile, because layers sits below solver. The test passes only on the expected error.
#include "solver/trainer.hpp"
