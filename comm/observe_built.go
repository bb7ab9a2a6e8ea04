//go:build !gorun_noobs

package comm

// observable is false only in a build with -tags gorun_noobs, which
// compiles out the observer's nil checks on the operation path, to
// measure what they cost when off (scripts/obs-cost.sh). Such a build
// refuses a timeline or metrics.
const observable = true
