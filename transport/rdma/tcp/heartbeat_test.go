package tcp

import (
	"testing"
	"time"
)

// A link is cut after heartbeatSilent without acknowledgements, or later
// where its round trips say its queues hold data long.
func TestSilentAfter(t *testing.T) {
	for _, tc := range []struct {
		srtt, rttvar, want time.Duration
	}{
		{50 * time.Microsecond, 20 * time.Microsecond, heartbeatSilent},  // loopback, veth
		{100 * time.Millisecond, 25 * time.Millisecond, heartbeatSilent}, // 4 × 200 ms = 800 ms
		{300 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second}, // a full shaped queue
	} {
		if got := silentAfter(linkState{srtt: tc.srtt, rttvar: tc.rttvar}); got != tc.want {
			t.Errorf("silentAfter(srtt %v, rttvar %v) = %v, want %v", tc.srtt, tc.rttvar, got, tc.want)
		}
	}
}
