package engine

import (
	"container/list"
	"context"
	"errors"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// RegCache registers caller buffers on one device and keeps the
// registrations, keyed by address and length, in a bounded LRU, so a
// training loop that reduces the same slice every step registers it once.
// Evicted and remaining entries are deregistered (Close). A cached
// registration pins its memory until evicted.
type RegCache struct {
	dev rdma.Device
	max int

	mu     sync.Mutex
	lru    *list.List // of *regEntry, most recent first
	m      map[regKey]*list.Element
	recent [4]regEntry // the last registrations returned: no map lookup on a hit
	next   int

	Hits, Misses int // counters for tests and debugging
}

type regKey struct {
	addr uint64
	n    int
}

type regEntry struct {
	key regKey
	mr  *rdma.MR
}

// NewRegCache returns a cache of at most max registrations on dev.
func NewRegCache(dev rdma.Device, max int) *RegCache {
	if max < 1 {
		max = 1
	}
	return &RegCache{dev: dev, max: max, lru: list.New(), m: map[regKey]*list.Element{}}
}

// Get returns an MR covering buf (nil for an empty buf), registering it on
// a miss with local write, remote write and remote read access.
func (c *RegCache) Get(buf []byte) (*rdma.MR, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	k := regKey{rdma.AddrOf(buf), len(buf)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.recent {
		if r := &c.recent[i]; r.key == k && r.mr != nil && r.mr.Valid() {
			c.Hits++
			return r.mr, nil
		}
	}
	mr, err := c.get(k, buf)
	if err == nil {
		c.recent[c.next] = regEntry{key: k, mr: mr}
		c.next = (c.next + 1) % len(c.recent)
	}
	return mr, err
}

// get is Get's lookup in the LRU; mu is held.
func (c *RegCache) get(k regKey, buf []byte) (*rdma.MR, error) {
	if e, ok := c.m[k]; ok {
		ent := e.Value.(*regEntry)
		if ent.mr.Valid() {
			c.lru.MoveToFront(e)
			c.Hits++
			return ent.mr, nil
		}
		c.lru.Remove(e)
		delete(c.m, k)
	}
	c.Misses++
	mr, err := c.dev.Register(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err != nil {
		return nil, err
	}
	c.m[k] = c.lru.PushFront(&regEntry{key: k, mr: mr})
	for c.lru.Len() > c.max {
		e := c.lru.Back()
		ent := e.Value.(*regEntry)
		if err := ent.mr.Deregister(); err != nil && c.lru.Len() <= 2*c.max {
			// in use by an outstanding request: keep it a while longer
			c.lru.MoveToFront(e)
			break
		}
		c.lru.Remove(e)
		delete(c.m, ent.key)
	}
	return mr, nil
}

// Revoke deregisters buf's cached registration, if any, and drops it: a
// remote write by its rkey fails from then on, and one under way has
// ended when Revoke returns (rdma.MR.DeregisterWait). If ctx ends first,
// the registration stays cached and valid, and Revoke returns the error.
func (c *RegCache) Revoke(ctx context.Context, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	k := regKey{rdma.AddrOf(buf), len(buf)}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil
	}
	if err := e.Value.(*regEntry).mr.DeregisterWait(ctx); err != nil && !errors.Is(err, rdma.ErrClosed) {
		return err
	}
	c.lru.Remove(e)
	delete(c.m, k)
	for i := range c.recent {
		if c.recent[i].key == k {
			c.recent[i] = regEntry{}
		}
	}
	return nil
}

// Len is the number of cached registrations.
func (c *RegCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Close deregisters every cached registration.
func (c *RegCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if err := e.Value.(*regEntry).mr.Deregister(); err != nil && first == nil {
			first = err
		}
	}
	c.lru.Init()
	clear(c.m)
	c.recent = [4]regEntry{}
	return first
}
