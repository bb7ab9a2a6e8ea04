//go:build gorun_noobs

package collectives

// statsBuilt: see stats_built.go.
const statsBuilt = false
