// lattn/cuda_graph_state.h — the old name of lattn/mla_common_state.h (MlaCommonState), kept so existing code compiles.
#pragma once
#include "lattn/mla_common_state.h"  // IWYU pragma: export
