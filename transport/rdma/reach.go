package rdma

import (
	"sort"
	"sync"
)

// Reach is how far a provider's connections go.
type Reach int

const (
	ReachUnknown Reach = iota // registered with RegisterProvider: never picked automatically
	ReachProcess              // within one process (mem)
	ReachHost                 // between processes of one host (shm)
	ReachNetwork              // between hosts (tcp, verbs)
)

func (r Reach) String() string {
	switch r {
	case ReachProcess:
		return "process"
	case ReachHost:
		return "host"
	case ReachNetwork:
		return "network"
	}
	return "unknown"
}

// ProviderInfo is what a provider declares when it registers.
type ProviderInfo struct {
	Name  string
	Reach Reach
	// NeedsIP: Listen wants an IP address of this host (tcp, verbs'
	// rdma_cm), not a loopback placeholder.
	NeedsIP bool
	// Preference orders automatic choice between two ranks that several
	// providers can connect: higher first; 0 is never chosen
	// automatically, only by name.
	Preference int
}

var (
	infoMu sync.RWMutex
	infos  = map[string]ProviderInfo{}
)

// RegisterProviderInfo registers a provider with its reach (see
// RegisterProvider).
func RegisterProviderInfo(info ProviderInfo, open OpenFunc) {
	RegisterProvider(info.Name, open)
	infoMu.Lock()
	infos[info.Name] = info
	infoMu.Unlock()
}

// LookupProvider returns what the named provider declared; ok is false if
// it is not registered.
func LookupProvider(name string) (info ProviderInfo, ok bool) {
	providersMu.RLock()
	_, ok = providers[name]
	providersMu.RUnlock()
	if !ok {
		return ProviderInfo{}, false
	}
	infoMu.RLock()
	info, found := infos[name]
	infoMu.RUnlock()
	if !found {
		info = ProviderInfo{Name: name}
	}
	return info, true
}

// ProvidersByPreference lists the registered providers that automatic
// choice may use (Preference > 0) and whose reach is at least min (and at
// most max), most preferred first.
func ProvidersByPreference(min, max Reach) []ProviderInfo {
	var out []ProviderInfo
	for _, name := range Providers() {
		if info, ok := LookupProvider(name); ok && info.Preference > 0 && info.Reach >= min && info.Reach <= max {
			out = append(out, info)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Preference > out[j].Preference })
	return out
}
