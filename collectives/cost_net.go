package collectives

// The cost model between hosts.
//
// A communicator whose ranks span hosts takes its algorithms from the
// constants of provider "net" (netProvider): the links between hosts, as
// the namespace cluster (scripts/cluster) has them, one rank per host. The
// model is cost.go's; only the constants differ. They are fitted by
// TestCostPointsNet (cost_net_test.go) with TestCostPoints' code on the
// points scripts/cluster/costpoints.sh measured (cost_points_net.csv).
// Each rank there has a host of its own and the model gives it a CPU
// (NewTable derives the table between hosts with one CPU per rank,
// whatever its caller says): Overhead and Turn, which count only where
// ranks share CPUs, are not fitted and are 0.

// netCost is the constants between hosts: TestCostPointsNet on
// cost_points_net.csv, which scripts/cluster/costpoints.sh measured on
// 2026-11-28 12:04-12:43 UTC (3 passes, the fastest kept) on the namespace
// cluster at 2 Gbit/s, 1-minute load 3.0-6.3 (other sessions' tests and
// builds): within 30% at 33 of its 55 check points (2 and 4 hosts),
// median 26%, p90 77%. β, 2.72 ns/B, is below the link's 4 ns/B (a
// 2-host broadcast of 4 MiB took 4.1): the fit trades those points against
// the allreduces of 3 hosts, whose factors are the one-host providers'
// (allReduceFactor), and whose small messages wait for the CPUs that the
// hosts' ranks share on this 2-CPU machine.
var netCost = Cost{Alpha: 1.46e-05, Latency: 1.61e-05, Beta: 2.72e-09, Gamma: 5.34e-10, Spill: 0.491, Cache: 16 << 20}
