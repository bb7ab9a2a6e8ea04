package rdma

import "sync"

// WrapFunc decorates a device comm opened: spec is the user's request (for
// fault injection, GORUN_FAULT) and rank the rank it applies to.
type WrapFunc func(dev Device, spec string, rank int) (Device, error)

var (
	wrapMu   sync.RWMutex
	wrappers = map[string]WrapFunc{}
)

// RegisterWrapper makes a device wrapper available by name, as
// RegisterProvider does for providers; a package that is not linked into
// a binary adds nothing to it. transport/rdma/faulty registers "faulty".
func RegisterWrapper(name string, wrap WrapFunc) {
	wrapMu.Lock()
	wrappers[name] = wrap
	wrapMu.Unlock()
}

// LookupWrapper returns the named wrapper, or nil if none is linked in.
func LookupWrapper(name string) WrapFunc {
	wrapMu.RLock()
	defer wrapMu.RUnlock()
	return wrappers[name]
}
