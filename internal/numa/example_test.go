package numa_test

import (
	"fmt"

	"github.com/gorun-hpc/gorun/internal/numa"
)

// The launcher's --bind-to numa for three local ranks on the fake
// three-socket tree in testdata (node 3 is memory-only).
func ExampleTopology_CPUSetFor() {
	topo, err := numa.Load("testdata/fake4")
	if err != nil {
		fmt.Println(err)
		return
	}
	for r := range 3 {
		cpus, _ := topo.CPUSetFor(r, 3, numa.BindNUMA)
		fmt.Printf("rank %d: %s\n", r, numa.FormatCPUList(cpus))
	}
	fmt.Println("mlx5_0 is on node", topo.RDMANode("mlx5_0"))
	// Output:
	// rank 0: 0-3,12-15
	// rank 1: 4-7,16-19
	// rank 2: 8-11,20-23
	// mlx5_0 is on node 2
}
