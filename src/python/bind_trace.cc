// Bindings for this area (filled in by its owner).
#include "python/bind.h"

namespace nvmw::py {

void BindTrace(nb::module_& m) {}

}  // namespace nvmw::py
