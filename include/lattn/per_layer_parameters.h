// lattn/per_layer_parameters.h — attention hyperparameters that some plan
// steps need to be the same in every layer (seed 004, docs/metadata.md;
// FlashInfer-style planning).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lattn {

struct PerLayerParameters {
  int window_left = -1;                   // left sliding-window size (tokens); -1: none
  std::optional<double> logits_soft_cap;  // tanh soft cap of the logits; nullopt: none
  double sm_scale = 0;                    // softmax scale
  friend bool operator==(const PerLayerParameters&, const PerLayerParameters&) = default;
};

// What get_per_layer_parameters reads from one attention layer's impl.
struct AttentionLayerHyperparameters {
  std::optional<std::pair<int, int>> sliding_window;  // (left, right); nullopt: none
  std::optional<double> logits_soft_cap;
  double scale = 0;  // softmax scale
};

// Named layers in model order (a Python dict keeps insertion order).
using PerLayerParameterMap = std::vector<std::pair<std::string, PerLayerParameters>>;

// window_left = sliding_window->first, or -1 without a window; soft cap and
// scale as given. (The seed also asserts every impl is of the backend's
// class; a C++ caller passes only its own layers.)
PerLayerParameterMap get_per_layer_parameters(
    const std::vector<std::pair<std::string, AttentionLayerHyperparameters>>& layers);

// The common value of every layer. AssertionError with the seed's texts:
// "No attention layers found in the model." for an empty map, and
// "FlashInfer backend currently only supports models in which all layers
// share the same values for the following hyperparameters: `window_left`,
// `logits_soft_cap`, `sm_scale`." when a layer differs.
PerLayerParameters infer_global_hyperparameters(const PerLayerParameterMap& per_layer_params);

}  // namespace lattn
