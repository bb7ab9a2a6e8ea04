//go:build !gorun_noobs

package engine

// statsBuilt is false only in a build with -tags gorun_noobs, which
// compiles out the per-message Stats checks; it exists to measure what
// they cost when off (scripts/obs-cost.sh).
const statsBuilt = true
