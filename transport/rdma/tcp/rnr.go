package tcp

import "time"

// stall holds the stream until a receive is posted, as an RC responder's
// receiver-not-ready retries would: RNRRetry times RNRTimer apart (forever
// if RNRRetry < 0). Every later request waits behind this one. A posted
// receive, the RNR timer or any poll resumes it.
func (c *conn) stall() {
	p := &c.ps
	p.state, p.tries = psRNR, 0
	c.rnrWait.Store(true)
	if c.cfg.RNRRetry == 0 {
		c.rnrExceeded()
		return
	}
	c.retryLater()
}

func (c *conn) retryLater() {
	c.ps.retryAt = time.Now().Add(c.cfg.RNRTimer)
	if c.rc != nil {
		c.rnrTimer.Reset(c.cfg.RNRTimer)
	}
}

// rnrRetry resumes a receiver-not-ready wait: the frame is served when a
// receive is there, fails when the retries are spent, and otherwise waits
// on (stalled).
func (c *conn) rnrRetry() (stalled bool, err error) {
	p := &c.ps
	if c.headRecv() != nil {
		p.state = psHeader
		c.rnrWait.Store(false)
		c.rnrTimer.Stop()
		return false, c.dispatch()
	}
	if time.Now().Before(p.retryAt) {
		return true, nil
	}
	if c.peerGone() {
		// The stream is held, so its end would not be read: look.
		return true, errPeerClosed
	}
	p.tries++
	if c.cfg.RNRRetry >= 0 && p.tries >= c.cfg.RNRRetry {
		c.rnrExceeded()
		return false, nil
	}
	c.retryLater()
	return true, nil
}

// rnrExceeded drains the waiting request and fails it.
func (c *conn) rnrExceeded() {
	c.rnrWait.Store(false)
	c.rnrTimer.Stop()
	c.expectPayload(nil, int(c.ps.h.length), thenRNR)
}
