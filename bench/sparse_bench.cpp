// Sparse MLA on the CPU: sparse decode / prefill over top-k slots and the
// lightning indexer, against the same-run CPU ceilings. Usage:
//   sparse_bench [--threads N] [--repeats R]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness/harness.h"
#include "harness/sparse_cases.h"

int main(int argc, char** argv) {
  int threads = 0, repeats = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
  }
  using namespace lattn::bench;
  const Ceilings before = measure_cpu_ceilings(threads);
  std::vector<SparseRow> rows;
  for (SparseCase c : sparse_target_cases({SparsePhase::decode, SparsePhase::prefill, SparsePhase::indexer})) {
    c.threads = threads;
    rows.push_back(time_sparse_case(c, repeats));
  }
  const Ceilings ceil = best_of(before, measure_cpu_ceilings(threads));
  std::fputs(format_sparse_table(ceil, rows).c_str(), stdout);
  return 0;
}
