// tools/provenance.h — what every JSON output of `lattn` says about itself:
// the schema version of the output, the lattn version and commit that made
// it, when and on which host (docs/cli.md, "JSON outputs").
#pragma once

#include <nlohmann/json.hpp>

namespace lattn::cli {

// Bumped when a field of any JSON output changes meaning or is removed.
inline constexpr int kJsonSchemaVersion = 1;

// {"schema_version", "lattn_version", "commit", "timestamp" (UTC, ISO 8601), "host"}.
nlohmann::ordered_json provenance_json();

// j with the provenance fields first.
nlohmann::ordered_json with_provenance(const nlohmann::ordered_json& j);

}  // namespace lattn::cli
