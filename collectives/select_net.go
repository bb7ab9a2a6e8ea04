package collectives

// The table between hosts.
//
// A communicator whose ranks span hosts (linked by tcp or verbs over a
// network) takes its table from the cost model with the constants of the
// links between hosts (provider "net", cost_net.go), fitted on points
// measured on the namespace cluster, one rank per host.

// netProvider names the links between hosts in TableFor and NewTable.
const netProvider = "net"
