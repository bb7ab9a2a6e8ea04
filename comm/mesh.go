package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// connectMesh connects c (already numbered: c.rank of c.size) to every
// other endpoint of eps: it picks a provider per peer, dials the lower
// ranks and accepts the higher ones on the listeners, every listener
// concurrently, and establishes a link on each connection. op names the
// operation in errors ("init", "shrink"). On error nothing stays open.
func (c *Comm) connectMesh(ctx context.Context, op string, eps []*endpoint, devByName map[string]*collectives.Device, lnByName map[string]rdma.Listener) ([]*collectives.Link, error) {
	rank, size := c.rank, c.size
	me := eps[rank]
	prov := make([]string, size)
	accepts := map[string]int{}
	for q, ep := range eps {
		if q == rank {
			continue
		}
		if prov[q] = pickProvider(c.cfg.transport, me, ep); prov[q] == "" || devByName[prov[q]] == nil {
			return nil, &RankError{Rank: q, Op: op, Err: fmt.Errorf("no common transport (this rank has %v, it has %v)", sortedKeys(me.addrs), sortedKeys(ep.addrs))}
		}
		if q > rank {
			accepts[prov[q]]++
		}
	}
	c.debugf(debugInfo, "transports %v", prov)

	params := stagingFor(c.cfg, size)
	links := make([]*collectives.Link, size)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	record := func(l *collectives.Link, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil && (l.Peer < 0 || l.Peer >= size || l.Peer == rank || links[l.Peer] != nil) {
			err = fmt.Errorf("gorun: unexpected connection from rank %d", l.Peer)
			l.Close()
		}
		if err != nil {
			errs = append(errs, err)
			cancel()
			return
		}
		links[l.Peer] = l
	}
	establish := func(conn rdma.Conn, d *collectives.Device) (*collectives.Link, error) {
		l, err := collectives.Establish(cctx, conn, d, rank, params)
		if err != nil {
			conn.Close()
		}
		return l, err
	}
	for q := 0; q < rank; q++ { // dial the lower ranks
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := devByName[prov[q]]
			conn, err := d.Dev.DialQP(cctx, eps[q].addrs[prov[q]], d.QPInit())
			if err != nil {
				record(nil, &RankError{Rank: q, Op: op, Err: fmt.Errorf("dial %s: %w", prov[q], err)})
				return
			}
			l, err := establish(conn, d)
			if err == nil && l.Peer != q {
				l.Close()
				err = fmt.Errorf("dialed rank %d, reached rank %d", q, l.Peer)
			}
			if err != nil {
				record(nil, &RankError{Rank: q, Op: op, Err: err})
				return
			}
			record(l, nil)
		}()
	}
	for name, n := range accepts { // accept the higher ones, one acceptor per listener
		ln, d := lnByName[name], devByName[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				conn, err := ln.AcceptQP(cctx, d.QPInit())
				if err != nil {
					record(nil, fmt.Errorf("gorun: accept %s: %w", name, err))
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := establish(conn, d)
					if err != nil {
						record(nil, fmt.Errorf("gorun: handshake on %s: %w", name, err))
						return
					}
					record(l, nil)
				}()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		for _, l := range links {
			if l != nil {
				l.Close()
			}
		}
		return nil, errors.Join(errs...)
	}
	if op != "init" {
		c.obs.reconnected(size - 1) // metrics.go
	}
	return links, nil
}
