package kernels

import "github.com/klauspost/cpuid/v2"

// Cache sizes in bytes, for sizing pipeline chunks; -1 when unknown. L2 and
// L3 are as cpuid reports them (per core or shared, depending on the CPU).

// L1DCacheSize is the level-1 data cache size.
func L1DCacheSize() int { return cpuid.CPU.Cache.L1D }

// L2CacheSize is the level-2 cache size.
func L2CacheSize() int { return cpuid.CPU.Cache.L2 }

// L3CacheSize is the level-3 cache size.
func L3CacheSize() int { return cpuid.CPU.Cache.L3 }
