// Bindings for this area (filled in by its owner).
#include "python/bind.h"

namespace nvmw::py {

void BindYcsb(nb::module_& m) {}

}  // namespace nvmw::py
