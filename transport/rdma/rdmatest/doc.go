// Package rdmatest is the conformance suite of the transport/rdma
// providers: one table of cases, each written once against a peer and run
// against every provider, with the peer in the same process or in a child
// process (the test binary re-run).
//
// A provider package uses it as:
//
//	func TestMain(m *testing.M) { os.Exit(rdmatest.Main(m)) }
//	func TestConformance(t *testing.T) {
//		rdmatest.Run(t, rdmatest.Options{Provider: "tcp", CrossProcess: true})
//	}
//
// Each case gets a fresh pair of devices and a fresh connection: the test
// side "a" (always in the test process) dials the peer "b", which listens
// on Options.ListenAddr. The peer is driven through a small interface
// (allocate and register buffers, fill them with a pattern, post receives,
// post requests, collect completions, checksum a range, deregister); in
// the cross-process mode every call is a request over a pair of pipes to
// the child, which serves it on its own device. The child is started once
// per Run with CHILD_ENV set, dies with the parent (Pdeathsig, and EOF on
// its control pipe) and exits after a hard timeout in any case.
//
// The cq/ cases check the poll contract (transport/rdma/cq.go): the test
// side binds several connections to one CQ made with Device.CreateCQ
// (DialQP), and the peer, which keeps private queues, accepts them as
// further conns (ListenMore, AcceptMore) and drives each through On(k).
// Completions carry the test-side conn and kind in their wrid. One case
// starts a second, independent peer (a second child process, or in-process
// a second device) and kills it to check that a dead peer's requests are
// flushed into the shared CQ.
//
// What is checked, and what is not observable:
//   - posting before the connection is established cannot be observed
//     through Dial, which returns a connected Conn; the suite checks posts
//     after Close (ErrClosed), posts on a conn whose peer closed (an error),
//     and that Dial to an address nobody listens on fails promptly;
//   - write completions do not by themselves promise visibility at the
//     target; the suite checks data after a later send has been received,
//     which the ordering rule does promise.
//
// Concurrency: Run executes its cases one after another; Pair's conns obey
// the rdma.Conn rules.
package rdmatest
