// Package release publishes a value that other goroutines only read,
// without the full barrier of a locked exchange. It owns no state.
package release
