package bootstrap

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	full := meta{
		Rank: 1<<31 - 1, Size: 1<<31 - 1,
		JobID: strings.Repeat("j", MaxJobID), Host: strings.Repeat("h", MaxHost),
		Leaving: true,
		Blob:    bytes.Repeat([]byte{0xff}, MaxBlob),
	}
	for _, m := range []meta{
		{Rank: -1, Size: 1, JobID: "j"},
		{Rank: 3, Size: 8, JobID: "job-42", Host: "n1/abcd", Blob: []byte("tcp://10.0.0.1:7000")},
		{Rank: 2, Size: 4, JobID: "j", Leaving: true, Forming: true, Joining: true, Abandoned: true, Behind: true},
		full,
	} {
		b, err := m.encode()
		if err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		}
		if len(b) > memberlist.MetaMaxSize {
			t.Fatalf("encoded meta is %d bytes, memberlist allows %d", len(b), memberlist.MetaMaxSize)
		}
		got, err := decodeMeta(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got.Rank != m.Rank || got.Size != m.Size || got.JobID != m.JobID ||
			got.Host != m.Host || got.Leaving != m.Leaving || got.Forming != m.Forming || got.Joining != m.Joining ||
			got.Abandoned != m.Abandoned || got.Behind != m.Behind || !bytes.Equal(got.Blob, m.Blob) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
	}
	b, _ := full.encode()
	if len(b) != metaFixedMax+MaxBlob {
		t.Errorf("worst-case meta is %d bytes, metaFixedMax+MaxBlob = %d", len(b), metaFixedMax+MaxBlob)
	}
}

func TestMetaLimits(t *testing.T) {
	for _, m := range []meta{
		{Size: 1, JobID: "j", Blob: make([]byte, MaxBlob+1)},
		{Size: 1, JobID: strings.Repeat("j", MaxJobID+1)},
		{Size: 1, JobID: "j", Host: strings.Repeat("h", MaxHost+1)},
	} {
		if _, err := m.encode(); !errors.Is(err, ErrMetaTooLarge) {
			t.Errorf("encode oversize: err = %v, want ErrMetaTooLarge", err)
		}
	}
	if _, err := (&meta{Rank: -2, Size: 1}).encode(); !errors.Is(err, ErrBadMeta) {
		t.Errorf("rank -2: err = %v", err)
	}
	good, _ := (&meta{Rank: 1, Size: 2, JobID: "j", Blob: []byte("x")}).encode()
	bad := map[string][]byte{
		"empty":    nil,
		"version":  append([]byte{2}, good[1:]...),
		"flags":    append([]byte{1, 0x80}, good[2:]...),
		"trailing": append(append([]byte(nil), good...), 0),
		"short":    good[:len(good)-1],
		"overlong": append([]byte{1, 0, 0x82, 0x00}, good[3:]...), // rank 1 as two bytes
	}
	if good[2] != 2 {
		t.Fatalf("rank 1 encodes as %#x, the overlong case is wrong", good[2])
	}
	for name, b := range bad {
		if _, err := decodeMeta(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if _, err := decodeMeta(append([]byte{9}, good[1:]...)); !errors.Is(err, ErrMetaVersion) {
		t.Errorf("version 9: err = %v, want ErrMetaVersion", err)
	}
}

// FuzzMeta checks that no input crashes the decoder and that whatever
// decodes re-encodes to the same bytes (the encoding is canonical).
func FuzzMeta(f *testing.F) {
	for _, m := range []meta{
		{Rank: -1, Size: 4, JobID: "job"},
		{Rank: 3, Size: 4, JobID: "job", Host: "h", Leaving: true, Blob: []byte("blob")},
	} {
		b, _ := m.encode()
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := m.encode()
		if err != nil {
			t.Fatalf("decoded meta does not encode: %v", err)
		}
		if len(again) > memberlist.MetaMaxSize {
			t.Fatalf("decoded meta encodes to %d bytes", len(again))
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical: %x re-encodes to %x", b, again)
		}
	})
}

func TestMetaJob(t *testing.T) {
	b, _ := (&meta{Rank: -1, Size: 300, JobID: "the-job", Blob: []byte("x")}).encode()
	if job, ok := metaJob(b); !ok || string(job) != "the-job" {
		t.Errorf("metaJob = %q, %v", job, ok)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 0, 1, 0}, b[:4]} {
		if _, ok := metaJob(bad); ok {
			t.Errorf("metaJob(%x) accepted", bad)
		}
	}
	if n := testing.AllocsPerRun(100, func() { metaJob(b) }); n != 0 {
		t.Errorf("metaJob allocates %v times", n)
	}
}
