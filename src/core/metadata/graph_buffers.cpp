// The builder's persistent CUDA-graph storage (see core/metadata/graph_buffers.h).
#include "core/metadata/graph_buffers.h"

#include <cstring>

namespace lattn::detail {

std::shared_ptr<GraphBuffers> GraphBuffers::create(const CudaGraphConfig& config) {
  auto g = std::make_shared<GraphBuffers>();
  g->max_batch_size = config.max_batch_size;
  g->max_blocks_per_seq = config.max_blocks_per_seq;
  const size_t rows = size_t(config.max_batch_size);
  ArenaLayout layout;
  g->slot_mapping = layout.add(rows, 8);
  g->query_start_loc = layout.add(rows + 1, 4);
  g->seq_start_loc = layout.add(rows + 1, 4);
  g->seq_lens = layout.add(rows, 4);
  g->context_lens = layout.add(rows, 4);
  g->block_table = layout.add(rows * size_t(config.max_blocks_per_seq), 4);
  g->empty = layout.total();
  g->storage = std::make_shared<MetadataStorage>();
  g->storage->host = Buffer(layout.total(), Device::cpu());
  std::memset(g->storage->host.data(), 0, layout.total());
  return g;
}

}  // namespace lattn::detail
