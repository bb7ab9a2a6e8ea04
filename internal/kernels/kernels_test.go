package kernels

import (
	"math"
	"testing"
)

func TestFloat16RoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := Float16(h)
		v := f.Float32()
		got := F16From(v)
		if math.IsNaN(float64(v)) {
			if !math.IsNaN(float64(got.Float32())) {
				t.Fatalf("nan %#04x came back as %#04x", h, uint16(got))
			}
			continue
		}
		if got != f {
			t.Fatalf("fp16 %#04x -> %v -> %#04x", h, v, uint16(got))
		}
	}
}

func TestFloat16Rounding(t *testing.T) {
	cases := []struct {
		in   float32
		want Float16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {1e-8, 0},
		{5.960464477539063e-08, 0x0001}, // smallest subnormal
		{1 + 1.0/2048, 0x3c00},          // halfway, rounds to even
		{1 + 3.0/2048, 0x3c02},          // halfway, rounds to even (up)
	}
	for _, c := range cases {
		if got := F16From(c.in); got != c.want {
			t.Errorf("F16From(%v) = %#04x, want %#04x", c.in, uint16(got), uint16(c.want))
		}
	}
}

func TestBFloat16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BFloat16(h)
		v := f.Float32()
		if math.IsNaN(float64(v)) {
			continue
		}
		if got := BF16From(v); got != f {
			t.Fatalf("bf16 %#04x -> %v -> %#04x", h, v, uint16(got))
		}
	}
	if got := BF16From(1 + 1.0/256); got != 0x3f80 { // halfway: even
		t.Errorf("BF16From halfway = %#04x", uint16(got))
	}
}

func TestReduceRef(t *testing.T) {
	d := []int32{1, 5, -3}
	Reduce(Sum, d, []int32{2, 2, 2})
	if d[0] != 3 || d[1] != 7 || d[2] != -1 {
		t.Fatal(d)
	}
	Reduce(Max, d, []int32{4, 0, 0})
	if d[0] != 4 || d[1] != 7 || d[2] != 0 {
		t.Fatal(d)
	}
	h := []Float16{F16From(1.5)}
	Reduce(Prod, h, []Float16{F16From(2)})
	if h[0].Float32() != 3 {
		t.Fatal(h[0].Float32())
	}
	b := []byte{1, 2}
	ReduceBytes(Uint8, Sum, b, []byte{3, 4})
	if b[0] != 4 || b[1] != 6 {
		t.Fatal(b)
	}
}

func TestToFloat64(t *testing.T) {
	if ToFloat64(int8(-3)) != -3 || ToFloat64(uint64(1)<<40) != 1<<40 || ToFloat64(float32(0.5)) != 0.5 ||
		ToFloat64(F16From(1.5)) != 1.5 || ToFloat64(BF16From(-2)) != -2 || ToFloat64(uint16(65535)) != 65535 {
		t.Fatal("ToFloat64 lost a value")
	}
}
