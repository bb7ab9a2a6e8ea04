// Package numa reads the machine's NUMA topology from sysfs and places
// threads and memory on it: the nodes with their CPUs and distances, the
// node of each network and RDMA device, the CPU sets the launcher's
// --bind-to core|numa|none gives each local rank, thread and process CPU
// affinity (sched_setaffinity), and memory policy (mbind, get_mempolicy),
// mlock and MADV_DONTFORK for registered memory.
//
// Load reads a topology from any root directory, so tests use a fake tree;
// System reads the real one under "/". On a machine without NUMA support
// (no /sys/devices/system/node) the topology is one node 0 holding every
// online CPU. The memory and affinity calls exist on Linux only; elsewhere
// they return ErrNotSupported.
//
// Ownership and concurrency: a *Topology is immutable after Load and safe
// for concurrent use. BindThread changes the calling goroutine's OS thread
// and locks the goroutine to it; the other calls act on the memory or
// process they are given and are safe to call concurrently.
package numa
