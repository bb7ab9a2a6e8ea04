package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// The file of one rank is JSON lines, each with a "k" (kind) field:
//
//	{"k":"header","version":2,"rank":0,"size":4,"host":"h","pid":7,"restart":0,"clock":"monotonic"}
//	{"k":"lane","lane":1,"name":"ddp bucket 0"}
//	{"k":"comm","lane":0,"rank":0,"size":4,"id":"9f0c…"} (the communicator a lane records, at its first operation)
//	{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":5,"bytes":8,"ts":…,"end":…,"wait":…,"reduce":…}
//	{"k":"span","lane":2,"name":"backward","arg":0,"ts":…,"end":…}
//	{"k":"instant","lane":1,"name":"grad ready","arg":3,"ts":…}
//	{"k":"dropped","n":12}          (events lost here: the writer fell behind)
//	{"k":"sync","offset":…,"rtt":…}  (a new clock measurement, at a flush)
//	{"k":"clock","offset":…,"rtt":…} (last line; rtt 0: offset not measured)
//
// The offset applied is the last line's, or the last sync's when the file
// has no last line (the rank was killed) or its rtt is 0.
//
// A rank restarted by gorun --max-restarts (GORUN_RESTART=n) writes a file
// of its own, FILE.RANK.restartN (RestartPath), whose header says n: the
// first incarnation's file is kept, not overwritten. A process that opens
// a second recorder for the same file (a second comm.Init after Close,
// NewLocal again, both open or one after the other) writes the N-th later
// one to FILE.RANK.initN (FILE.RANK.restartM.initN; SessionPath), whose
// header says "init":N; ReadRanks folds those into the rank's file.

// fileVersion 2 added the header's restart and the comm record; Read
// takes version 1 files too (no comm records: lane 0 is taken for the
// world communicator).
const fileVersion = 2

// RestartPath is the file of rank's incarnation restart (0: the first
// process) of a timeline recorded to base: base.RANK, then
// base.RANK.restartN.
func RestartPath(base string, rank, restart int) string {
	p := base + "." + strconv.Itoa(rank)
	if restart > 0 {
		p += restartSuffix + strconv.Itoa(restart)
	}
	return p
}

const restartSuffix = ".restart"

// SessionPath is the file of the n-th recorder that one process opened
// after the first for path (a rank's RestartPath): path itself for n 0,
// else path.initN. A process that makes a rank's first communicator again
// (comm.Init after Close, NewLocal again) records there, so that it does
// not truncate the file of the one before.
func SessionPath(path string, n int) string {
	if n > 0 {
		path += sessionSuffix + strconv.Itoa(n)
	}
	return path
}

const sessionSuffix = ".init"

func appendHeader(b []byte, h Header) []byte {
	b = append(b, `{"k":"header","version":`...)
	b = strconv.AppendInt(b, fileVersion, 10)
	b = appendInt(b, "rank", int64(h.Rank))
	b = appendInt(b, "size", int64(h.Size))
	b = appendStr(b, "host", h.Host)
	b = appendInt(b, "pid", int64(h.PID))
	b = appendInt(b, "restart", int64(h.Restart))
	if h.Init > 0 {
		b = appendInt(b, "init", int64(h.Init))
	}
	return append(b, `,"clock":"monotonic"}`+"\n"...)
}

func appendComm(b []byte, lane int, c CommInfo) []byte {
	b = append(b, `{"k":"comm"`...)
	b = appendInt(b, "lane", int64(lane))
	b = appendInt(b, "rank", int64(c.Rank))
	b = appendInt(b, "size", int64(c.Size))
	b = appendStr(b, "id", strconv.FormatUint(c.ID, 16))
	return append(b, "}\n"...)
}

func appendLane(b []byte, lane int, name string) []byte {
	b = append(b, `{"k":"lane"`...)
	b = appendInt(b, "lane", int64(lane))
	b = appendStr(b, "name", name)
	return append(b, "}\n"...)
}

func appendDropped(b []byte, n uint64) []byte {
	b = append(b, `{"k":"dropped"`...)
	b = appendInt(b, "n", int64(n))
	return append(b, "}\n"...)
}

func appendClock(b []byte, offset, rtt int64) []byte {
	b = append(b, `{"k":"clock"`...)
	b = appendInt(b, "offset", offset)
	b = appendInt(b, "rtt", rtt)
	return append(b, "}\n"...)
}

func appendSync(b []byte, offset, rtt int64) []byte {
	b = append(b, `{"k":"sync"`...)
	b = appendInt(b, "offset", offset)
	b = appendInt(b, "rtt", rtt)
	return append(b, "}\n"...)
}

func appendEvent(b []byte, e *Event) []byte {
	switch e.Kind {
	case KindOp:
		b = append(b, `{"k":"op"`...)
	case KindSpan:
		b = append(b, `{"k":"span"`...)
	default:
		b = append(b, `{"k":"instant"`...)
	}
	b = appendInt(b, "lane", int64(e.Lane))
	b = appendStr(b, "name", e.Name)
	if e.Kind == KindOp {
		b = appendStr(b, "algo", e.Algo)
		b = appendInt(b, "seq", int64(e.Seq))
		b = appendInt(b, "bytes", e.Bytes)
	}
	b = appendInt(b, "arg", e.Arg)
	b = appendInt(b, "ts", e.Start)
	if e.Kind != KindInstant {
		b = appendInt(b, "end", e.End)
	}
	if e.Kind == KindOp {
		b = appendInt(b, "wait", e.Wait)
		b = appendInt(b, "reduce", e.Reduce)
	}
	if e.Err {
		b = append(b, `,"err":true`...)
	}
	return append(b, "}\n"...)
}

func appendInt(b []byte, key string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

func appendStr(b []byte, key, s string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendJSONString(b, s)
}

// appendJSONString quotes s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
		}
	}
	return append(b, '"')
}

// CommInfo says which communicator a lane records: this rank's rank in
// it, its size, and an ID its members share (a hash of the members'
// processes in rank order). Two communicators of the same processes in
// the same order (Dup, a Shrink that lost no one) share an ID; they are
// told apart by the order this process made them in.
type CommInfo struct {
	Rank, Size int
	ID         uint64
}

// RankFile is one rank's file as read back.
type RankFile struct {
	Path    string
	Header  Header
	Lanes   []string   // by lane number
	Comms   []CommInfo // by lane number; Size 0: not a communicator's, or no operation recorded
	Events  []Event    // in the order written
	Dropped uint64     // events lost to a full ring
	Drops   []Drop     // where
	Offset  int64      // launcher clock − this rank's clock, ns (the clock line's, else the last sync's)
	RTT     int64      // 0: the offset was not measured
	Closed  bool       // the file ends with its clock line (the rank closed its Comm)
	// Truncated: the last line was cut short (the rank was killed while
	// writing it) and is left out.
	Truncated bool
	// Restarts are this rank's later incarnations (gorun --max-restarts),
	// in restart order, as ReadRanks found them; each is a RankFile of its
	// own, without Restarts.
	Restarts []*RankFile
	// empty are files of this rank that held no events (for Remove).
	empty []string
	// sessions are the files of the process's later recorders folded in
	// (SessionPath; for Remove).
	sessions []string
}

// Incarnations is f followed by its Restarts.
func (f *RankFile) Incarnations() []*RankFile {
	return append([]*RankFile{f}, f.Restarts...)
}

// ErrEmpty is Read's error for a file without a complete header: its rank
// wrote nothing, as a rank killed before its first flush.
var ErrEmpty = errors.New("empty timeline")

// Drop says that N events were lost just before Events[Before].
type Drop struct {
	N      uint64
	Before int
}

type line struct {
	K       string `json:"k"`
	Version int    `json:"version"`
	Rank    int    `json:"rank"`
	Size    int    `json:"size"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Restart int    `json:"restart"`
	Init    int    `json:"init"`
	ID      string `json:"id"`
	Lane    int    `json:"lane"`
	Name    string `json:"name"`
	Algo    string `json:"algo"`
	Seq     uint32 `json:"seq"`
	Bytes   int64  `json:"bytes"`
	Arg     int64  `json:"arg"`
	TS      int64  `json:"ts"`
	End     int64  `json:"end"`
	Wait    int64  `json:"wait"`
	Reduce  int64  `json:"reduce"`
	Err     bool   `json:"err"`
	N       uint64 `json:"n"`
	Offset  int64  `json:"offset"`
	RTT     int64  `json:"rtt"`
}

// ReadFile reads one rank's file.
func ReadFile(path string) (*RankFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rf, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rf.Path = path
	return rf, nil
}

// Read parses one rank's file from r. A last line that does not parse is
// left out (Truncated): a rank killed while writing leaves one.
func Read(r io.Reader) (*RankFile, error) {
	rf := &RankFile{Lanes: []string{"comm"}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var bad error // a line that did not parse; an error unless it was the last
	for n := 1; sc.Scan(); n++ {
		if bad != nil {
			return nil, bad
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			bad = fmt.Errorf("line %d: %w", n, err)
			continue
		}
		if n == 1 {
			if l.K != "header" {
				return nil, fmt.Errorf("line 1: not a gorun timeline (no header)")
			}
			if l.Version < 1 || l.Version > fileVersion {
				return nil, fmt.Errorf("timeline version %d, this gorun reads 1 to %d", l.Version, fileVersion)
			}
			rf.Header = Header{Rank: l.Rank, Size: l.Size, Host: l.Host, PID: l.PID, Restart: l.Restart, Init: l.Init}
			continue
		}
		switch l.K {
		case "lane":
			for len(rf.Lanes) <= l.Lane {
				rf.Lanes = append(rf.Lanes, "")
			}
			rf.Lanes[l.Lane] = l.Name
		case "comm":
			id, err := strconv.ParseUint(l.ID, 16, 64)
			if err != nil || l.Lane < 0 || l.Lane >= 1<<16 || l.Size <= 0 || l.Rank < 0 || l.Rank >= l.Size {
				bad = fmt.Errorf("line %d: bad comm record", n)
				continue
			}
			for len(rf.Comms) <= l.Lane {
				rf.Comms = append(rf.Comms, CommInfo{})
			}
			rf.Comms[l.Lane] = CommInfo{Rank: l.Rank, Size: l.Size, ID: id}
		case "dropped":
			rf.Dropped += l.N
			rf.Drops = append(rf.Drops, Drop{N: l.N, Before: len(rf.Events)})
		case "sync":
			rf.Offset, rf.RTT = l.Offset, l.RTT
		case "clock":
			if l.RTT != 0 || rf.RTT == 0 {
				rf.Offset, rf.RTT = l.Offset, l.RTT
			}
			rf.Closed = true
		case "op", "span", "instant":
			e := Event{Lane: uint16(l.Lane), Name: l.Name, Algo: l.Algo, Seq: l.Seq, Bytes: l.Bytes, Arg: l.Arg,
				Start: l.TS, End: l.End, Wait: l.Wait, Reduce: l.Reduce, Err: l.Err}
			switch l.K {
			case "op":
				e.Kind = KindOp
			case "span":
				e.Kind = KindSpan
			default:
				e.Kind, e.End = KindInstant, l.TS
			}
			rf.Events = append(rf.Events, e)
		default:
			return nil, fmt.Errorf("line %d: unknown record %q", n, l.K)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	rf.Truncated = bad != nil
	if rf.Header.Size == 0 {
		return nil, ErrEmpty
	}
	return rf, nil
}
