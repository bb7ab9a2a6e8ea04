package rdmatest

import (
	"context"
	"errors"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The control protocol between the test process and the child: one JSON
// request per call, answered by one JSON response, over a pair of pipes
// (the child's fds 3 and 4). Bulk data never crosses it: buffers are filled
// from a seed and compared by checksum.

type request struct {
	Op      string
	Config  rdma.Config   `json:",omitzero"`
	Addr    string        `json:",omitempty"`
	Timeout time.Duration `json:",omitempty"`
	N       int           `json:",omitempty"`
	Off     int           `json:",omitempty"`
	Access  rdma.Access   `json:",omitempty"`
	Heap    bool          `json:",omitempty"`
	Seed    uint64        `json:",omitempty"`
	Buf     rbuf          `json:",omitzero"`
	WRID    uint64        `json:",omitempty"`
	Segs    []seg         `json:",omitempty"`
	Posts   []postReq     `json:",omitempty"`
	Conn    int           `json:",omitempty"` // which conn (On)
}

type response struct {
	Addr    string   `json:",omitempty"`
	Buf     rbuf     `json:",omitzero"`
	Sum     uint32   `json:",omitempty"`
	N       int      `json:",omitempty"`
	Data    []byte   `json:",omitempty"`
	WC      rdma.WC  `json:",omitzero"`
	ConnErr *wireErr `json:",omitempty"`
	Err     *wireErr `json:",omitempty"`
}

// wireErr carries an error across the process boundary, keeping which
// sentinel it wraps so errors.Is works on the test side.
type wireErr struct {
	Msg  string
	Kind string `json:",omitempty"`
}

var sentinels = []struct {
	name string
	err  error
}{
	{"not-connected", rdma.ErrNotConnected},
	{"not-registered", rdma.ErrNotRegistered},
	{"access", rdma.ErrAccess},
	{"closed", rdma.ErrClosed},
	{"not-supported", rdma.ErrNotSupported},
	{"busy", rdma.ErrBusy},
	{"invalid", rdma.ErrInvalid},
	{"queue-full", rdma.ErrQueueFull},
	{"auth", rdma.ErrAuth},
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
}

func toWire(err error) *wireErr {
	if err == nil {
		return nil
	}
	w := &wireErr{Msg: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			w.Kind = s.name
			break
		}
	}
	return w
}

func (w *wireErr) toErr() error {
	if w == nil {
		return nil
	}
	e := &peerError{msg: w.Msg}
	for _, s := range sentinels {
		if s.name == w.Kind {
			e.err = s.err
		}
	}
	return e
}

// peerError is an error that happened in the child process.
type peerError struct {
	msg string
	err error // the sentinel it wrapped there, or nil
}

func (e *peerError) Error() string { return "child: " + e.msg }
func (e *peerError) Unwrap() error { return e.err }

// handle serves one request on p.
func handle(p *localPeer, q *request) (resp response) {
	var err error
	if q.Conn != 0 {
		p = p.on(q.Conn)
	}
	switch q.Op {
	case "hello":
	case "listen":
		resp.Addr, err = p.Listen(q.Config, q.Addr)
	case "accept":
		err = p.Accept(q.Timeout)
	case "buf":
		resp.Buf, err = p.Buf(q.N, q.Access, q.Heap)
	case "fill":
		err = p.Fill(q.Buf, q.Off, q.N, q.Seed)
	case "sum":
		resp.Sum, err = p.Sum(q.Buf, q.Off, q.N)
	case "read":
		resp.Data, err = p.Read(q.Buf, q.Off, q.N)
	case "dereg":
		err = p.Deregister(q.Buf)
	case "recv":
		err = p.PostRecv(q.WRID, q.Segs)
	case "post":
		err = p.Post(q.Posts...)
	case "recvcomp":
		resp.WC, err = p.RecvComp(q.Timeout)
	case "sendcomp":
		resp.WC, err = p.SendComp(q.Timeout)
	case "recvcompsum":
		resp.WC, resp.Sum, err = p.RecvCompSum(q.Timeout, q.Buf, q.Off, q.N)
	case "connerr":
		var cerr error
		cerr, err = p.ConnErr()
		resp.ConnErr = toWire(cerr)
	case "listenmore":
		resp.Addr, err = p.ListenMore(q.Addr)
	case "acceptmore":
		resp.N, err = p.AcceptMore(q.Timeout)
	case "closeconn":
		err = p.CloseConn()
	case "close":
		err = p.Close()
	default:
		err = errors.New("unknown op " + q.Op)
	}
	resp.Err = toWire(err)
	return resp
}
