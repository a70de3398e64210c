// Provenance of the JSON outputs.
#include "provenance.h"

#include <unistd.h>

#include <ctime>
#include <string>

#include "lattn/version.h"

#ifndef LATTN_GIT_COMMIT
#define LATTN_GIT_COMMIT "unknown"
#endif

namespace lattn::cli {

nlohmann::ordered_json provenance_json() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {{"schema_version", kJsonSchemaVersion},
          {"lattn_version", version()},
          // The commit the build was configured at ("unknown" outside a git checkout).
          {"commit", LATTN_GIT_COMMIT},
          {"timestamp", stamp},
          {"host", host}};
}

nlohmann::ordered_json with_provenance(const nlohmann::ordered_json& j) {
  nlohmann::ordered_json out = provenance_json();
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = it.value();
  return out;
}

}  // namespace lattn::cli
