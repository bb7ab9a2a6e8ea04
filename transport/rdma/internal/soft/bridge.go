package soft

import (
	"context"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Bridge binds conn's queues to the shared CQs of init by pumping its
// private completion queues into them from two goroutines. It is the
// hand-off the poll contract exists to avoid: a stopgap for a provider
// that has no native shared CQ yet. A nil CQ in init leaves that queue
// private. The CQs must be *CQ.
func Bridge(conn rdma.Conn, init rdma.QPInit) rdma.Conn {
	if init.SendCQ == nil && init.RecvCQ == nil {
		return conn
	}
	b := &bridged{Conn: conn, init: init}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	pump := func(get func(context.Context) (rdma.WC, error), cq rdma.CQ) {
		defer b.wg.Done()
		q := cq.(*CQ)
		for {
			wc, err := get(ctx)
			if err != nil {
				return
			}
			q.Push(wc)
		}
	}
	if init.SendCQ != nil {
		b.wg.Add(1)
		go pump(conn.GetSendComp, init.SendCQ)
	}
	if init.RecvCQ != nil {
		b.wg.Add(1)
		go pump(conn.GetRecvComp, init.RecvCQ)
	}
	return b
}

type bridged struct {
	rdma.Conn
	init   rdma.QPInit
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (b *bridged) GetSendComp(ctx context.Context) (rdma.WC, error) {
	if b.init.SendCQ == nil {
		return b.Conn.GetSendComp(ctx)
	}
	return rdma.WaitComp(ctx, b.init.SendCQ, b.init.SendCQ.(*CQ).Closed())
}

func (b *bridged) GetRecvComp(ctx context.Context) (rdma.WC, error) {
	if b.init.RecvCQ == nil {
		return b.Conn.GetRecvComp(ctx)
	}
	return rdma.WaitComp(ctx, b.init.RecvCQ, b.init.RecvCQ.(*CQ).Closed())
}

// Close closes the connection and waits until its last completions (the
// flushes) have been pumped.
func (b *bridged) Close() error {
	err := b.Conn.Close()
	b.wg.Wait()
	b.cancel()
	return err
}
