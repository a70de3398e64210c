// src/cuda/sm90/common/warp_roles.h — the warp roles of the warp-specialized
// Hopper attention kernels (the dense and fp8 decode, the sparse kernel): two
// consumer warpgroups (threads 0..255) and one producer warpgroup (threads
// 256..383) that gives its registers to the consumers with setmaxnreg.
//
// ptxas budgets registers per warpgroup, so a lone producer warp would cost
// as much as the whole warpgroup; the launch (__launch_bounds__(384, 1))
// allocates 168 registers per thread, and setmaxnreg may only redistribute
// those: setmaxnreg.inc waits forever for registers the CTA lacks, hence the
// static_assert (a kernel that sets other budgets repeats it).
#pragma once

namespace lattn::cuda::sm90 {

template <int kProducerRegs_ = 24, int kConsumerRegs_ = 240>
struct WarpRoles {
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kProducerThreads = 128;
  static constexpr int kProducerRegs = kProducerRegs_, kConsumerRegs = kConsumerRegs_;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static_assert(kProducerRegs * kProducerThreads + kConsumerRegs * kConsumerThreads <= 168 * kThreads,
                "setmaxnreg may only redistribute the registers allocated at launch (168 per thread)");
};

}  // namespace lattn::cuda::sm90
