//go:build linux && cgo && rdma

package verbs

import "testing"

func TestRNRParams(t *testing.T) {
	for _, tc := range []struct {
		retry       int
		ms          float64
		count, code int
	}{
		{-1, 10, 7, 20},   // forever
		{0, 10, 0, 20},    // no retry
		{2, 10, 2, 20},    // as given; code 20 is 10.24 ms
		{7, 10, 6, 21},    // default: 70 ms in 6 waits of 15.36 ms
		{1000, 10, 7, 20}, // 10 s exceeds 6 × 491 ms: forever
		{100, 10, 6, 29},  // 1 s in 6 waits of 245.76 ms
		{3, 0.001, 3, 1},  // shortest timer
		{3, 10000, 3, 0},  // longest: code 0 is 655 ms
	} {
		count, code := rnrParams(tc.retry, tc.ms)
		if count != tc.count || code != tc.code {
			t.Errorf("rnrParams(%d, %v) = %d, %d; want %d, %d", tc.retry, tc.ms, count, code, tc.count, tc.code)
		}
	}
}
