// The environment switch of the batch-invariant mode (see core/batch_invariant.h).
#include "core/types/batch_invariant.h"

#include <cstdlib>
#include <string>

namespace lattn::detail {

bool batch_invariant_from_env() {
  const char* env = std::getenv("LATTN_BATCH_INVARIANT");
  if (env == nullptr) return false;
  const std::string v(env);
  return v == "1" || v == "true" || v == "on";
}

}  // namespace lattn::detail
