// Per-layer hyperparameters and their global value (see lattn/per_layer_parameters.h).
#include "lattn/per_layer_parameters.h"

#include "lattn/errors.h"

namespace lattn {

PerLayerParameterMap get_per_layer_parameters(
    const std::vector<std::pair<std::string, AttentionLayerHyperparameters>>& layers) {
  PerLayerParameterMap params;
  params.reserve(layers.size());
  for (const auto& [name, layer] : layers) {
    const int window_left = layer.sliding_window ? layer.sliding_window->first : -1;
    params.emplace_back(name, PerLayerParameters{window_left, layer.logits_soft_cap, layer.scale});
  }
  return params;
}

PerLayerParameters infer_global_hyperparameters(const PerLayerParameterMap& per_layer_params) {
  lattn_assert(!per_layer_params.empty(), "No attention layers found in the model.");
  const PerLayerParameters& global_params = per_layer_params.front().second;
  for (const auto& [name, params] : per_layer_params) {
    lattn_assert(params == global_params,
                 "FlashInfer backend currently only supports models in which all layers share the same values for "
                 "the following hyperparameters: `window_left`, `logits_soft_cap`, `sm_scale`.");
  }
  return global_params;
}

}  // namespace lattn
