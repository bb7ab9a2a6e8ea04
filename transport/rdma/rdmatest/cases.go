package rdmatest

import (
	"fmt"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// testCase is one row of the table: run gets a fresh connected pair whose
// devices were opened with Options.Config changed by cfg.
type testCase struct {
	name string
	cfg  func(*rdma.Config)
	long bool // only without -short
	run  func(e *env)
}

// sizes are the payload sizes of the data-integrity cases.
var sizes = []struct {
	n    int
	long bool
}{{0, false}, {1, false}, {7, false}, {4096, false}, {1<<20 + 13, false}, {64 << 20, true}}

// cases is the table. Rules of transport/rdma/doc.go and the case(s) that
// check each:
//   - not connected / closed: closed-posts, peer-closed, dial-refused;
//     a peer that dies with requests in flight: peer-died-mid-transfer;
//   - local buffers inside an MR with the access needed, inline excepted:
//     local-checks, inline;
//   - remote key, bounds, access; error state; flushed: remote-access/*,
//     error-state;
//   - receive needed, RNR retries: rnr-exceeded, rnr-writeimm, rnr-in-time;
//   - unsignaled: unsignaled, unsignaled-failure;
//   - post order for effects and completions: ordering/*, many-outstanding;
//   - MRs busy while in use: deregister-busy;
//   - no empty regions (ibv_reg_mr's rule), zero-byte transfers without
//     one: register/zero-length;
//   - concurrent posting on one conn: concurrent-posters;
//   - FlagFence, queue depths (rdma.Config): fence, queue-full;
//   - the poll contract (cq.go), on conns bound to a shared CQ: Poll never
//     blocks and allocates nothing: cq/empty-poll; per-conn post order in
//     a shared CQ: cq/order; Arm, Poll, Notify without a lost wake-up:
//     cq/lost-wakeup; a token after Arm, each completion handed out once:
//     cq/once; flushes on close, peer close and peer death reach the CQ:
//     cq/flush-*; Get*Comp on a bound queue: cq/get-comp; zero-length
//     requests: cq/zero-length; transfers much larger than one step of a
//     provider's progress, driven by Poll alone: cq/bulk; Close wakes a
//     sleeper: cq/close.
var cases = buildCases()

func buildCases() []testCase {
	var cs []testCase
	for _, sz := range sizes {
		for _, op := range []struct {
			name string
			run  func(e *env, n int)
		}{{"write", caseWrite}, {"read", caseRead}, {"send", caseSend}, {"writeimm", caseWriteImm}} {
			cs = append(cs, testCase{
				name: fmt.Sprintf("data/%s/bytes=%d", op.name, sz.n),
				long: sz.long,
				run:  func(e *env) { op.run(e, sz.n) },
			})
		}
	}
	cs = append(cs,
		testCase{name: "sgl/writev", run: caseWritev},
		testCase{name: "sgl/sendv", run: caseSendv},
		testCase{name: "sgl/readv", run: caseReadv},
		testCase{name: "sgl/recvv", run: caseRecvv},
		testCase{name: "many-outstanding/writes", run: caseManyWrites},
		testCase{name: "many-outstanding/sends", run: caseManySends},
		testCase{name: "both-directions", run: caseBothDirections},
		testCase{name: "concurrent-posters", run: caseConcurrentPosters},
		testCase{name: "fence", run: caseFence},
		testCase{name: "queue-full", cfg: shallowQueues, run: caseQueueFull},
		testCase{name: "ordering/send-after-write", run: caseOrderingToPeer},
		testCase{name: "ordering/send-after-write-from-peer", run: caseOrderingFromPeer},
		testCase{name: "register", run: caseRegister},
		testCase{name: "register/zero-length", run: caseZeroLengthRegions},
		testCase{name: "local-checks", run: caseLocalChecks},
		testCase{name: "inline", run: caseInline},
		testCase{name: "deregister-busy", cfg: rnrForever, run: caseDeregisterBusy},
		testCase{name: "unsignaled", run: caseUnsignaled},
		testCase{name: "unsignaled-failure", run: caseUnsignaledFailure},
		testCase{name: "error-state", run: caseErrorState},
		testCase{name: "rnr-exceeded", cfg: rnrShort, run: caseRNRExceeded},
		testCase{name: "rnr-writeimm", cfg: rnrShort, run: caseRNRWriteImm},
		testCase{name: "rnr-in-time", cfg: rnrPatient, run: caseRNRInTime},
		testCase{name: "recv-too-small", run: caseRecvTooSmall},
		testCase{name: "closed-posts", cfg: rnrForever, run: caseClosedPosts},
		testCase{name: "peer-closed", run: casePeerClosed},
		testCase{name: "dial-refused", run: caseDialRefused},
		testCase{name: "peer-died-mid-transfer", run: casePeerDiedMidTransfer},
		testCase{name: "cq/empty-poll", run: caseCQEmptyPoll},
		testCase{name: "cq/order", run: caseCQOrder},
		testCase{name: "cq/lost-wakeup", run: caseCQLostWakeup},
		testCase{name: "cq/once", run: caseCQOnce},
		testCase{name: "cq/flush-close", cfg: rnrForever, run: caseCQFlushClose},
		testCase{name: "cq/flush-peer-closed", cfg: rnrForever, run: caseCQFlushPeerClosed},
		testCase{name: "cq/flush-both-close", cfg: rnrForever, run: caseCQFlushBothClose},
		testCase{name: "cq/flush-peer-died", cfg: rnrForever, run: caseCQFlushPeerDied},
		testCase{name: "cq/get-comp", run: caseCQGetComp},
		testCase{name: "cq/zero-length", run: caseCQZeroLength},
		testCase{name: "cq/bulk", run: caseCQBulk},
		testCase{name: "cq/close", run: caseCQClose},
	)
	for _, ra := range remoteAccessCases {
		cs = append(cs, testCase{name: "remote-access/" + ra.name, run: func(e *env) { caseRemoteAccess(e, ra) }})
	}
	return cs
}
