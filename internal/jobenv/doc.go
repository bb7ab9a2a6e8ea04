// Package jobenv owns gorun's environment contract: the name of every
// GORUN_* variable, and the one parser of each value that more than one
// package reads (timeouts, Slurm node lists, seeds, host identity, the
// launchers a job may come from).
//
// comm, launcher, capi, jobctl and bootstrap ask this package instead of
// reading or spelling the variables themselves, so the readers cannot
// disagree. It holds no state: every function is a pure function of its
// arguments, of a getenv function the caller passes, or of the machine
// (HostIdentity), and is safe for concurrent use.
package jobenv
