//go:build linux && cgo && rdma

package verbs

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/internal/soft"
)

// Supported reports whether this build contains the cgo provider.
const Supported = true

const provider = "verbs"

// Name is the provider's registered name, in every build.
const Name = provider

// DeviceEnv names the RDMA device to open (e.g. "mlx5_0"); by default the
// first device with an active port.
const DeviceEnv = jobenv.VerbsDevice

func init() {
	info := rdma.ProviderInfo{Name: provider, Reach: rdma.ReachNetwork, NeedsIP: true, Preference: 30}
	rdma.RegisterProviderInfo(info, func(cfg rdma.Config) (rdma.Device, error) { return Open(cfg) })
}

// device is one ibv_context (shared with librdmacm) and its protection domain.
type device struct {
	cfg      rdma.Config
	ctx      *C.struct_ibv_context
	pd       *C.struct_ibv_pd
	name     string
	maxSGE   int // scatter-gather entries of a request (max_sge)
	maxRdSGE int // entries of an RDMA read's local scatter list (max_sge_rd)
	maxWR    int
	maxCQE   int
	rdAtom   int // initiator depth / responder resources for RDMA reads
	rnr      int // rnr_retry_count for rdma_connect/rdma_accept
	rnrCode  int // min_rnr_timer code for Config.RNRTimer
	node     int // NUMA node for Alloc: Config.NUMANode, else the device's, else -1

	loopOnce sync.Once
	loopIP   net.IP // what a loopback address stands for (see splitAddr)

	counts counts // refusals (counters.go)

	// mu guards the fields below. It is never held across ibv_reg_mr
	// (pinning a large buffer takes long) or ibv_create_cq (a kernel
	// call that allocates and maps the queue): a registration or CQ
	// creation in progress is counted in pending instead, which Close
	// waits for before it deregisters the MRs and frees the protection
	// domain.
	mu     sync.Mutex
	closed bool
	// fatal is the device's death (IBV_EVENT_DEVICE_FATAL, or its events
	// unreadable), naming the event and the device; set once, under mu,
	// by asyncFail. New work is refused with it (refuse).
	fatal   atomic.Pointer[error]
	pending sync.WaitGroup // registrations and CQ creations in progress (Add under mu while !closed)
	conns   map[*conn]struct{}
	lns     map[*listener]struct{}
	dials   map[*cmChannel]struct{} // the event channels of dials in progress (connect)
	cqs     map[*cq]struct{}        // shared CQs
	mrs     map[*rdma.MR]struct{}
}

// Test hooks, nil outside tests: register calls testHookRegister just
// before ibv_reg_mr and testHookRegistered after it succeeds, before the
// MR is published; CreateCQ calls testHookCreateCQ just before
// ibv_create_cq and testHookCQCreated after it, before the CQ is
// published. None holds d.mu.
var (
	testHookRegister, testHookRegistered func(buf []byte)
	testHookCreateCQ, testHookCQCreated  func(depth int)
)

// begin counts a registration or CQ creation in progress, unless the
// device is closed; the caller calls d.pending.Done when it ends.
func (d *device) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.pending.Add(1)
	return true
}

func opErr(op string, err error) error { return rdma.NewOpError(provider, op, err) }

// refuse is op's error if the device has died (fatal), else nil: work
// asked of it after an IBV_EVENT_DEVICE_FATAL fails at once, wrapping
// ErrAsyncEvent, rather than reach the dead device.
func (d *device) refuse(op string) error {
	if p := d.fatal.Load(); p != nil {
		return opErr(op, *p)
	}
	return nil
}

// errnoErr maps an errno from librdmacm or libibverbs onto the package's
// sentinels where one fits, keeping the errno in the chain. ENOMEM is
// ErrQueueFull only for a post (postErrnoErr): elsewhere (ibv_reg_mr over
// RLIMIT_MEMLOCK, a QP or CQ the device cannot make) no queue is full.
func errnoErr(err error) error {
	var en syscall.Errno
	if !errors.As(err, &en) {
		if err == nil {
			return rdma.ErrInvalid
		}
		return err
	}
	switch en {
	case syscall.EINVAL:
		return fmt.Errorf("%w (%w)", rdma.ErrInvalid, en)
	case syscall.ENOSYS, syscall.EOPNOTSUPP, syscall.ENODEV:
		return fmt.Errorf("%w (%w)", rdma.ErrNotSupported, en)
	}
	return en
}

// postErrnoErr is errnoErr for ibv_post_send and ibv_post_recv, whose
// ENOMEM says the work queue is full.
func postErrnoErr(err error) error {
	var en syscall.Errno
	if errors.As(err, &en) && (en == syscall.ENOMEM || en == syscall.EAGAIN) {
		return fmt.Errorf("%w (%w)", rdma.ErrQueueFull, en)
	}
	return errnoErr(err)
}

// Open opens the RDMA device named by $GORUN_VERBS_DEVICE, or the first one
// with an active port, and allocates its protection domain.
func Open(cfg rdma.Config) (rdma.Device, error) {
	cfg = cfg.WithDefaults()
	list, n, err := deviceList()
	if err != nil {
		return nil, opErr("open", fmt.Errorf("%w: %v", rdma.ErrNotSupported, err))
	}
	want := os.Getenv(DeviceEnv)
	var ctx *C.struct_ibv_context
	for i := 0; i < n; i++ {
		c := C.gorun_dev_at(list, C.int(i))
		name := C.GoString(C.gorun_dev_name(c))
		if want != "" {
			if name == want {
				ctx = c
			}
			continue
		}
		if ctx == nil || (n > 1 && hasActivePort("/", name) && !hasActivePort("/", C.GoString(C.gorun_dev_name(ctx)))) {
			ctx = c
		}
	}
	if ctx == nil {
		return nil, opErr("open", fmt.Errorf("%w: device %q not found", rdma.ErrNotSupported, want))
	}
	var attr C.struct_gorun_dev_attr
	if r, err := C.gorun_query_device(ctx, &attr); r != 0 {
		return nil, opErr("open", errnoErr(err))
	}
	pd, err := C.ibv_alloc_pd(ctx)
	if pd == nil {
		return nil, opErr("open", errnoErr(err))
	}
	d := &device{
		cfg: cfg, ctx: ctx, pd: pd,
		name:   C.GoString(C.gorun_dev_name(ctx)),
		maxSGE: min(int(attr.max_sge), soft.MaxSGE),
		maxWR:  int(attr.max_qp_wr),
		maxCQE: int(attr.max_cqe),
		rdAtom: min(int(attr.max_qp_rd_atom), int(attr.max_qp_init_rd_atom), 16),
		conns:  map[*conn]struct{}{},
		lns:    map[*listener]struct{}{},
		dials:  map[*cmChannel]struct{}{},
		cqs:    map[*cq]struct{}{},
		mrs:    map[*rdma.MR]struct{}{},
	}
	// max_sge_rd limits the local scatter list of an RDMA read (iWARP
	// devices allow one entry); a device that leaves it 0 has no
	// limit of its own.
	d.maxRdSGE = d.maxSGE
	if n := int(attr.max_sge_rd); n > 0 {
		d.maxRdSGE = min(n, d.maxSGE)
	}
	d.rnr, d.rnrCode = rnrParams(cfg.RNRRetry, cfg.RNRTimer.Seconds()*1000)
	if d.node = cfg.NUMANode; d.node < 0 {
		d.node = numaNode("/", d.name)
	}
	if err := d.watchAsync(); err != nil {
		C.ibv_dealloc_pd(pd)
		return nil, opErr("open", err)
	}
	return d, nil
}

var devices struct {
	sync.Mutex
	list **C.struct_ibv_context
	n    int
}

// deviceList is rdma_get_devices, called once per process: librdmacm's
// contexts are shared by every cm_id, and closing them (rdma_free_devices
// on the last reference) makes the next Open reopen the device, which
// costs about a second under an emulated CPU. They live as long as the
// process.
func deviceList() (**C.struct_ibv_context, int, error) {
	devices.Lock()
	defer devices.Unlock()
	if devices.list != nil {
		return devices.list, devices.n, nil
	}
	var n C.int
	list, err := C.rdma_get_devices(&n)
	if list == nil || n == 0 {
		if list != nil {
			C.rdma_free_devices(list)
		}
		if err == nil || n == 0 {
			err = errors.New("no RDMA device")
		}
		return nil, 0, err
	}
	devices.list, devices.n = list, int(n)
	return list, int(n), nil
}

// rnrParams maps Config.RNRRetry and RNRTimer onto the 3-bit
// rnr_retry_count (7 means "retry forever") and the min_rnr_timer code,
// keeping the total patience, retries × timer: up to 6 retries are used as
// they are; more are folded into 6 longer waits while the IB timer table
// allows (6 × 491 ms), and beyond that, or for -1, the QP retries forever.
func rnrParams(retry int, timerMS float64) (count, code int) {
	switch {
	case retry < 0:
		return 7, rnrTimerCode(timerMS)
	case retry <= 6:
		return retry, rnrTimerCode(timerMS)
	}
	total := float64(retry) * timerMS
	if total/6 > rnrTimerMillis[31] {
		return 7, rnrTimerCode(timerMS)
	}
	return 6, rnrTimerCode(total / 6)
}

// rnrTimerMillis is the IB spec's table of min_rnr_timer codes (code 0 is
// 655.36 ms).
var rnrTimerMillis = [32]float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24,
	0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
	40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}

// rnrTimerCode is the smallest code whose wait is at least ms.
func rnrTimerCode(ms float64) int {
	for c := 1; c < len(rnrTimerMillis); c++ {
		if rnrTimerMillis[c] >= ms {
			return c
		}
	}
	return 0
}

func (d *device) Name() string { return provider }

// DeviceName is the RDMA device this Device opened (e.g. "rxe0").
func (d *device) DeviceName() string { return d.name }

func ibvAccess(a rdma.Access) C.int {
	var f C.int
	if a&rdma.AccessLocalWrite != 0 {
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&rdma.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_LOCAL_WRITE // verbs requires both
	}
	if a&rdma.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

// Register registers buf with ibv_reg_mr. Go memory is pinned with
// runtime.Pinner until Deregister (see the package doc for why that is sound).
func (d *device) Register(buf []byte, access rdma.Access) (*rdma.MR, error) {
	return d.register("register", buf, access, nil)
}

// Alloc registers n bytes of mmap'd memory outside the Go heap, placed on
// the device's NUMA node (or Config.NUMANode) with soft.MmapNode.
func (d *device) Alloc(n int, access rdma.Access) (*rdma.MR, error) {
	if n <= 0 {
		return nil, opErr("alloc", rdma.ErrInvalid)
	}
	if err := d.refuse("alloc"); err != nil {
		return nil, err
	}
	buf, err := soft.MmapNode(n, d.node)
	if err != nil {
		return nil, opErr("alloc", err)
	}
	mr, err := d.register("alloc", buf, access, func() { _ = soft.Munmap(buf) })
	if err != nil {
		_ = soft.Munmap(buf)
	}
	return mr, err
}

func (d *device) register(op string, buf []byte, access rdma.Access, free func()) (*rdma.MR, error) {
	if len(buf) == 0 {
		return nil, opErr(op, rdma.ErrInvalid)
	}
	if err := d.refuse(op); err != nil {
		return nil, err
	}
	if !d.begin() {
		return nil, opErr(op, rdma.ErrClosed)
	}
	defer d.pending.Done()
	pin := new(runtime.Pinner)
	pin.Pin(&buf[0]) // a no-op for mmap'd memory
	if testHookRegister != nil {
		testHookRegister(buf)
	}
	mr, err := C.ibv_reg_mr(d.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), ibvAccess(access))
	if mr == nil {
		pin.Unpin()
		err = errnoErr(err)
		if errors.Is(err, syscall.ENOMEM) {
			err = fmt.Errorf("%w (more pinned memory than RLIMIT_MEMLOCK, ulimit -l, allows?)", err)
		}
		return nil, opErr(op, err)
	}
	if testHookRegistered != nil {
		testHookRegistered(buf)
	}
	d.mu.Lock()
	if d.closed {
		// Close began during ibv_reg_mr; it waits (pending) for this
		// registration to end before it frees the protection domain.
		d.mu.Unlock()
		C.ibv_dereg_mr(mr)
		pin.Unpin()
		return nil, opErr(op, rdma.ErrClosed)
	}
	m := rdma.NewMR(buf, access, uint32(mr.lkey), uint32(mr.rkey), d, func(m *rdma.MR) error {
		r := C.ibv_dereg_mr(mr) // returns an errno value
		pin.Unpin()
		if free != nil {
			free()
		}
		d.mu.Lock()
		delete(d.mrs, m)
		d.mu.Unlock()
		if r != 0 {
			return opErr("deregister", errnoErr(syscall.Errno(r)))
		}
		return nil
	})
	m.Handle = mr
	d.mrs[m] = struct{}{}
	d.mu.Unlock()
	return m, nil
}

func (d *device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	return d.listen(ctx, addr)
}

func (d *device) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	return d.dial(ctx, addr, rdma.QPInit{})
}

// DialQP implements rdma.Device.
func (d *device) DialQP(ctx context.Context, addr string, init rdma.QPInit) (rdma.Conn, error) {
	return d.dial(ctx, addr, init)
}

// track adds a connection or listener unless the device is closed
// (ErrClosed) or dead (fatal: one made while the device died would not
// have been failed with it).
func (d *device) track(c *conn, l *listener) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.goneLocked(); err != nil {
		return err
	}
	if c != nil {
		d.conns[c] = struct{}{}
	}
	if l != nil {
		d.lns[l] = struct{}{}
	}
	return nil
}

// trackDial adds the event channel of a dial in progress, which the
// device's death (asyncFail) or Close kicks, unless the device is closed
// or dead already.
func (d *device) trackDial(ch *cmChannel) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.goneLocked(); err != nil {
		return err
	}
	d.dials[ch] = struct{}{}
	return nil
}

func (d *device) forgetDial(ch *cmChannel) {
	d.mu.Lock()
	delete(d.dials, ch)
	d.mu.Unlock()
}

// gone is why the device takes nothing new and a dial in progress must
// end: it closed (ErrClosed) or died (fatal); or nil.
func (d *device) gone() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.goneLocked()
}

func (d *device) goneLocked() error {
	if d.closed {
		return rdma.ErrClosed
	}
	if p := d.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// kickDialsLocked wakes every dial in progress; d.mu is held.
func (d *device) kickDialsLocked() {
	for ch := range d.dials {
		ch.w.kick()
	}
}

func (d *device) forget(c *conn, l *listener) {
	d.mu.Lock()
	delete(d.conns, c)
	delete(d.lns, l)
	d.mu.Unlock()
}

func (d *device) forgetCQ(q *cq) {
	d.mu.Lock()
	delete(d.cqs, q)
	d.mu.Unlock()
}

// Close closes every listener, connection and shared CQ, waits for the
// registrations and CQ creations in progress (they fail with ErrClosed),
// deregisters every MR and frees the protection domain.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.kickDialsLocked() // they end with ErrClosed
	var conns []*conn
	var lns []*listener
	for c := range d.conns {
		conns = append(conns, c)
	}
	for l := range d.lns {
		lns = append(lns, l)
	}
	d.mu.Unlock()
	for _, l := range lns {
		_ = l.Close()
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
	d.mu.Lock()
	var cqs []*cq
	for q := range d.cqs {
		cqs = append(cqs, q)
	}
	d.mu.Unlock()
	for _, q := range cqs {
		_ = q.Close()
	}
	d.pending.Wait() // no registration or CQ creation starts once closed is set
	d.mu.Lock()
	var mrs []*rdma.MR
	for m := range d.mrs {
		mrs = append(mrs, m)
	}
	d.mu.Unlock()
	var first error
	for _, m := range mrs {
		if err := m.Deregister(); err != nil && first == nil && !errors.Is(err, rdma.ErrClosed) {
			first = err
		}
	}
	d.unwatchAsync()
	if r := C.ibv_dealloc_pd(d.pd); r != 0 && first == nil {
		first = opErr("close", errnoErr(syscall.Errno(r)))
	}
	return first
}
