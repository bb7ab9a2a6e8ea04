//go:build gorun_noobs

package engine

// statsBuilt: see stats_built.go.
const statsBuilt = false
