// Package reliability holds gorun's fault-injection, leak and security
// tests. It has no library code: everything is in _test.go files, and
// `go test ./reliability` is the whole of it.
//
// The tests start real jobs: the test binary re-runs itself as the rank
// program (TestMain dispatches on GORUN_RELIABILITY_CHILD), with the
// launcher's environment contract (GORUN_RANK, GORUN_SEEDS, ...) set by
// the test, so that a rank can be killed, frozen or cut off while its peers
// are inside a collective. Faults come from GORUN_FAULT (comm/fault.go,
// transport/rdma/faulty, which this package's tests link in), from signals sent by the test, from
// faulty.Proxy on the wire and from network namespaces with tc netem.
// RELIABILITY.md at the repository root records what they measured.
//
// Related: examples/soak, comm/fault.go and comm/shrink.go. Concurrency: tests
// that start jobs bound how many run at once (see trialSlots); every child
// process is killed and reaped before its test returns.
package reliability
