#include "kernels/cpu_features.h"

#include <cpuinfo.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace hearth::kernels {
namespace {

// Physical cores this process may run on, as Linux's topology files list
// them (distinct package and core ids over the CPUs of the affinity mask,
// so a container's cpuset bounds it); 0 when they cannot be read. cpuinfo
// counts cores from CPUID, which some hypervisors fill in as if two vCPUs
// were SMT siblings of one core: on one 2-vCPU AMD EPYC VM it found 1 core,
// while the kernel lists two cores of one thread each, and hearth's default
// pool ran on half the machine.
int linux_physical_cores() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    long package = -1, core = -1;
    std::ifstream(dir + "physical_package_id") >> package;
    std::ifstream(dir + "core_id") >> core;
    if (package < 0 || core < 0) return 0;
    cores.insert({package, core});
  }
  return static_cast<int>(cores.size());
}

// The display family of a CPUID leaf 1 EAX: the base family, plus the
// extended family when the base is 0xf.
int display_family(std::uint32_t leaf1_eax) {
  const int base = static_cast<int>((leaf1_eax >> 8) & 0xf);
  return base == 0xf ? base + static_cast<int>((leaf1_eax >> 20) & 0xff) : base;
}

CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  const bool have_cpuinfo = cpuinfo_initialize();
  // __builtin_cpu_supports also checks that the OS saves the wider registers.
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // clang's __builtin_cpu_supports has no "f16c"; cpuinfo's check includes
  // the OS's AVX state support as well.
  f.f16c = have_cpuinfo && cpuinfo_has_x86_f16c();
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  if (have_cpuinfo && cpuinfo_get_cores_count() > 0) {
    const cpuinfo_core* core = cpuinfo_get_core(0);
    f.amd = core->vendor == cpuinfo_vendor_amd;
    f.family = display_family(core->cpuid);
  }
  if (const int n = linux_physical_cores(); n > 0) {
    f.physical_cores = n;
  } else if (have_cpuinfo && cpuinfo_get_cores_count() > 0) {
    f.physical_cores = static_cast<int>(cpuinfo_get_cores_count());
  } else {
    const unsigned n = std::thread::hardware_concurrency();
    f.physical_cores = n == 0 ? 1 : static_cast<int>(n);
  }
  return f;
}

// -1: no override.
std::atomic<int> forced_isa{-1};
std::atomic<int> forced_decode_prefetch{-1};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool isa_supported(Isa isa) {
#ifdef HEARTH_SCALAR_KERNELS_ONLY
  return isa == Isa::kScalar;  // no SIMD file was compiled
#endif
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx512Vnni:
      return avx512 && f.avx512vnni;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = [] {
    for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvx2}) {
      if (isa_supported(isa)) return isa;
    }
    return Isa::kScalar;
  }();
  return best;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

Isa active_isa() {
  const int forced = forced_isa.load(std::memory_order_relaxed);
  return forced < 0 ? best_isa() : static_cast<Isa>(forced);
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(forced_isa.load()) {
  if (!isa_supported(isa)) {
    std::fprintf(stderr, "hearth: cannot force ISA %s: this CPU does not support it\n",
                 isa_name(isa));
    std::abort();
  }
  forced_isa.store(static_cast<int>(isa));
}

ScopedIsa::~ScopedIsa() { forced_isa.store(previous_); }

bool decode_prefetch_helps(bool amd, int family, Isa isa) {
  return !(amd && family == 0x19 && isa >= Isa::kAvx512);
}

bool decode_prefetch() {
  const int forced = forced_decode_prefetch.load(std::memory_order_relaxed);
  if (forced >= 0) return forced != 0;
  const CpuFeatures& f = cpu_features();
  return decode_prefetch_helps(f.amd, f.family, active_isa());
}

ScopedDecodePrefetch::ScopedDecodePrefetch(bool on) : previous_(forced_decode_prefetch.load()) {
  forced_decode_prefetch.store(on ? 1 : 0);
}

ScopedDecodePrefetch::~ScopedDecodePrefetch() { forced_decode_prefetch.store(previous_); }

}  // namespace hearth::kernels
