// CpuRelax: the pause hint of a spin-wait loop. It tells the core that this thread is
// busy-waiting, so a sibling hyper-thread gets the pipeline and the loop burns less power.
#ifndef NVMW_UTIL_SPIN_H_
#define NVMW_UTIL_SPIN_H_

namespace nvmw {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace nvmw

#endif  // NVMW_UTIL_SPIN_H_
