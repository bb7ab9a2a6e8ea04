//go:build gorun_noobs

package comm

// observable: see observe_built.go.
const observable = false
