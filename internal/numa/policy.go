package numa

// Policy is a memory policy mode (MPOL_*).
type Policy int

const (
	PolicyDefault    Policy = 0 // MPOL_DEFAULT: the thread's policy (usually local)
	PolicyPreferred  Policy = 1 // MPOL_PREFERRED: the node first, others when it is full
	PolicyBind       Policy = 2 // MPOL_BIND: only the nodes
	PolicyInterleave Policy = 3 // MPOL_INTERLEAVE: round-robin over the nodes
	PolicyLocal      Policy = 4 // MPOL_LOCAL: the node of the CPU that touches it
)
