// src/core/metadata/metadata_fill.h — pass 2 of a metadata build
// (internal): lays every index array of the batch out in one arena (or the
// builder's pointer-stable CUDA-graph arena) and fills it in a single pass
// per array, then cuts the views (metadata_views.h). Runs only on a batch
// that batch_validation.h's plan_batch accepted: it checks nothing itself.
#pragma once

#include "core/metadata/batch_inputs.h"
#include "core/metadata/batch_validation.h"
#include "core/metadata/graph_buffers.h"
#include "lattn/metadata.h"

namespace lattn::detail {

// `graph` may be nullptr unless options.cudagraph_batch_size is set.
MlaMetadata fill_metadata(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const SpecBatch& batch,
                          const BuildOptions& options, const BatchPlan& plan);
MlaMetadata fill_metadata(const MetadataBuilderConfig& cfg, const GraphBuffers* graph, const CommonBatch& batch,
                          const BuildOptions& options, const BatchPlan& plan);

}  // namespace lattn::detail
