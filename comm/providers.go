package comm

// The providers, registered for their side effect. verbs registers itself
// only in builds with cgo and the "rdma" tag.
import (
	"fmt"
	"strings"

	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
	_ "github.com/gorun-hpc/gorun/transport/rdma/shm"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
	_ "github.com/gorun-hpc/gorun/transport/rdma/verbs"
)

// autoProviders names the registered providers auto may open, with reach
// between min and max, most preferred first (the registry's order: verbs,
// shm, tcp for Init; mem for NewLocal).
func autoProviders(min, max rdma.Reach) []string {
	var names []string
	for _, info := range rdma.ProvidersByPreference(min, max) {
		names = append(names, info.Name)
	}
	return names
}

// parseTransport checks a transport name: auto or a registered provider.
func parseTransport(name string) (string, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "auto" {
		return name, nil
	}
	if _, ok := rdma.LookupProvider(name); ok {
		return name, nil
	}
	return "", fmt.Errorf("want auto or one of %s (the providers in this build)", strings.Join(rdma.Providers(), ", "))
}

// reachesRanks refuses a forced transport that cannot connect the job's
// ranks, which are separate processes: mem reaches only within one.
func reachesRanks(transport string, job jobEnv) error {
	info, ok := rdma.LookupProvider(transport)
	if !ok || job.Size < 2 || info.Reach != rdma.ReachProcess {
		return nil
	}
	return fmt.Errorf("transport %q connects ranks of one process only (NewLocal); the %d ranks of a launched job are processes: use auto, %s",
		transport, job.Size, strings.Join(autoProviders(rdma.ReachHost, rdma.ReachNetwork), ", "))
}
