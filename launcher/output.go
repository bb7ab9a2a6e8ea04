package launcher

import (
	"bytes"
	"io"
	"strconv"
	"sync"
)

// maxLine is the longest line kept whole; a longer one is cut into lines of
// this size (each tagged), so one rank cannot make gorun buffer without bound.
const maxLine = 64 << 10

// maxMarker bounds a wrapper's marker line (marker.go), for cut.
const maxMarker = 512

// console serializes everything gorun and its ranks print. Each write is a
// whole line, so lines from different ranks and streams never interleave.
// On a terminal it also keeps one status line at the bottom of stderr,
// erased before other output and redrawn after it.
type console struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	tty    bool   // stderr is a terminal: the status line is redrawn in place
	status string // the status line currently shown (tty only)
}

// writeLines writes p, one or more whole lines, to w.
func (c *console) writeLines(w io.Writer, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status != "" {
		io.WriteString(c.stderr, "\r\x1b[K")
	}
	w.Write(p)
	if c.status != "" {
		io.WriteString(c.stderr, c.status)
	}
}

// Printf-like helpers write gorun's own messages as whole lines on stderr.
func (c *console) message(line string) {
	c.writeLines(c.stderr, []byte(line+"\n"))
}

// setStatus shows s as the status line; "" removes it. Off a terminal the
// status is printed as a plain line instead.
func (c *console) setStatus(s string) {
	if !c.tty {
		if s != "" {
			c.message(s)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == c.status {
		return
	}
	io.WriteString(c.stderr, "\r\x1b[K"+s)
	c.status = s
}

// rankWriter is the stdout or stderr of one rank: it collects bytes into
// lines and hands whole lines, tagged "[rank] ", to the console.
type rankWriter struct {
	con    *console
	w      io.Writer
	prefix []byte
	buf    []byte // an incomplete line
	out    []byte // reused for the tagged lines of one Write
	// tap, if set, sees every line (untagged, without its newline) before
	// the console does, on the goroutine that writes, and returns how
	// much of it the console gets: all of it, -1 for none (gorun's own
	// markers, marker.go), or the text before a marker that followed a
	// last line without a newline on the same stream ("text\x1egorun:exit 3").
	tap func(line []byte) int
	// file, if set, gets every line that reaches the console, untagged
	// and as the rank wrote it: a newline only where it wrote one
	// (--output-filename).
	file io.Writer
	fout []byte // reused for file's bytes of one Write: one write per Write, as the rank's
}

func newRankWriter(con *console, w io.Writer, rank int, tag bool) *rankWriter {
	rw := &rankWriter{con: con, w: w}
	if tag {
		rw.prefix = []byte("[" + strconv.Itoa(rank) + "] ")
	}
	return rw
}

// Write tags and forwards every complete line of p; it never fails.
func (rw *rankWriter) Write(p []byte) (int, error) {
	n := len(p)
	rw.out = rw.out[:0]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLine - len(rw.buf)
			if len(p) < room {
				rw.buf = append(rw.buf, p...)
				break
			}
			rw.buf = append(rw.buf, p[:room]...)
			p = p[room:]
			rw.cut()
			continue
		}
		rw.buf = append(rw.buf, p[:i]...)
		p = p[i+1:]
		rw.emit(true)
	}
	rw.output()
	return n, nil
}

// output writes what emit collected.
func (rw *rankWriter) output() {
	if len(rw.out) > 0 {
		rw.con.writeLines(rw.w, rw.out)
	}
	if len(rw.fout) > 0 {
		rw.file.Write(rw.fout)
		rw.fout = rw.fout[:0]
	}
}

// cut emits a full buffer as a line of its own. With a tap, a marker
// that may have begun in it stays in the buffer, so that it is not cut in
// two.
func (rw *rankWriter) cut() {
	var rest []byte
	if rw.tap != nil {
		if j := bytes.LastIndexByte(rw.buf, marker[0]); j > 0 && len(rw.buf)-j < maxMarker {
			rest = append(rest, rw.buf[j:]...)
			rw.buf = rw.buf[:j]
		}
	}
	rw.emit(false)
	rw.buf = append(rw.buf, rest...)
}

// emit moves the buffered line to out (and to file); nl says the rank
// ended it with a newline.
func (rw *rankWriter) emit(nl bool) {
	line := rw.buf
	rw.buf = rw.buf[:0]
	if rw.tap != nil {
		n := rw.tap(line)
		if n < 0 {
			return
		}
		if n < len(line) {
			line, nl = line[:n], false
		}
	}
	rw.out = append(rw.out, rw.prefix...)
	rw.out = append(rw.out, line...)
	rw.out = append(rw.out, '\n')
	if rw.file != nil {
		rw.fout = append(rw.fout, line...)
		if nl {
			rw.fout = append(rw.fout, '\n')
		}
	}
}

// Flush writes a last line that did not end in a newline.
func (rw *rankWriter) Flush() {
	if len(rw.buf) == 0 {
		return
	}
	rw.out = rw.out[:0]
	rw.emit(false)
	rw.output()
}
