package rdma

// Counters are a device's counts of refused work, for monitoring and tests.
type Counters struct {
	AuthFailures     uint64 // handshakes refused (wrong or missing token)
	AccessViolations uint64 // remote requests refused: unknown rkey, out of bounds, or access not granted
	ChecksumErrors   uint64 // payloads or headers whose CRC32C did not match
	ProtocolErrors   uint64 // malformed frames
}

// CounterSource is implemented by devices that count refused work.
type CounterSource interface{ Counters() Counters }
