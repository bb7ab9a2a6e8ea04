package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"
)

// The SIMD kernels are checked against the reference (reduceGeneric) for
// every level the CPU runs, every hot type and op, every length 0..300 and
// some larger ones, at byte offsets 0..63 into a buffer, and with dst
// aliasing an operand.

var hotTypes = []DType{Float32, Float64, Int32, Int64, F16, BF16}
var allOps = []Op{Sum, Prod, Min, Max, Avg}

// forEachLevel runs f once per level this CPU can run, with that level
// active, as a subtest named level=NAME; levels it cannot run are logged.
func forEachLevel(t *testing.T, f func(t *testing.T)) {
	for _, l := range []level{levelGeneric, levelAVX2, levelAVX512} {
		restore, ok := useLevel(l)
		if !ok {
			t.Logf("level %s: not supported by this CPU/build; not executed", l)
			continue
		}
		t.Run("level="+l.String(), f)
		restore()
	}
}

// fillRandom fills b with values of type dt, biased towards edge cases.
func fillRandom(r *rand.Rand, dt DType, b []byte) {
	n := len(b) / dt.Size()
	for i := 0; i < n; i++ {
		p := unsafe.Pointer(&b[i*dt.Size()])
		switch dt {
		case Float32:
			*(*float32)(p) = float32(randFloat(r))
		case Float64:
			*(*float64)(p) = randFloat(r)
		case F16:
			if r.IntN(2) == 0 {
				*(*uint16)(p) = uint16(r.Uint32()) // every bit pattern
			} else {
				*(*Float16)(p) = F16From(float32(randFloat(r)))
			}
		case BF16:
			if r.IntN(2) == 0 {
				*(*uint16)(p) = uint16(r.Uint32())
			} else {
				*(*BFloat16)(p) = BF16From(float32(randFloat(r)))
			}
		default:
			for j := 0; j < dt.Size(); j++ {
				b[i*dt.Size()+j] = byte(r.Uint32())
			}
			if r.IntN(4) == 0 { // small values, so min/max see ties
				for j := 1; j < dt.Size(); j++ {
					b[i*dt.Size()+j] = 0
				}
			}
		}
	}
}

func randFloat(r *rand.Rand) float64 {
	switch r.IntN(16) {
	case 0:
		return math.NaN()
	case 1:
		return math.Inf(1 - 2*r.IntN(2))
	case 2:
		return math.Copysign(0, float64(1-2*r.IntN(2)))
	case 3:
		return float64(math.Float32frombits(r.Uint32() & 0x807fffff)) // float32 subnormal
	case 4:
		return (r.Float64() - 0.5) * 1e5 // beyond fp16's range, sometimes
	case 5:
		return float64(r.IntN(5)) // ties
	case 6:
		return (r.Float64() - 0.5) * 1e-5
	}
	return r.NormFloat64() * 100
}

// isNaN reports whether element i of b (type dt) is a NaN.
func isNaN(dt DType, b []byte, i int) bool {
	p := unsafe.Pointer(&b[i*dt.Size()])
	switch dt {
	case Float32:
		v := *(*float32)(p)
		return v != v
	case Float64:
		v := *(*float64)(p)
		return v != v
	case F16:
		h := *(*uint16)(p)
		return h&0x7c00 == 0x7c00 && h&0x3ff != 0
	case BF16:
		h := *(*uint16)(p)
		return h&0x7f80 == 0x7f80 && h&0x7f != 0
	}
	return false
}

// sameResult compares two results element by element; any NaN matches any NaN.
func sameResult(dt DType, got, want []byte) (int, bool) {
	sz := dt.Size()
	for i := 0; i < len(want)/sz; i++ {
		g, w := got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz]
		if bytes.Equal(g, w) || (isNaN(dt, got, i) && isNaN(dt, want, i)) {
			continue
		}
		return i, false
	}
	return 0, true
}

func refBytes(dt DType, op Op, dst, a, b []byte) {
	restore, _ := useLevel(levelGeneric)
	defer restore()
	ReduceBytesTo(dt, op, dst, a, b)
}

// checkCase runs one case in the four aliasings and compares with the
// reference. buf holds three regions of n elements at byte offset off.
func checkCase(t *testing.T, r *rand.Rand, dt DType, op Op, n, off int) {
	t.Helper()
	nb := n * dt.Size()
	stride := nb + 64
	buf := make([]byte, 3*stride+64)
	a := buf[off : off+nb]
	b := buf[stride+off : stride+off+nb]
	d := buf[2*stride+off : 2*stride+off+nb]
	fillRandom(r, dt, a)
	fillRandom(r, dt, b)
	want := make([]byte, nb)
	refBytes(dt, op, want, a, b)
	fail := func(mode string, got []byte) {
		if i, ok := sameResult(dt, got, want); !ok {
			sz := dt.Size()
			t.Fatalf("%s %s/%s n=%d off=%d: element %d: got % x, want % x (a % x, b % x)",
				mode, dt, op, n, off, i, got[i*sz:(i+1)*sz], want[i*sz:(i+1)*sz], a[i*sz:(i+1)*sz], b[i*sz:(i+1)*sz])
		}
	}
	// dst separate: ReduceTo.
	ReduceBytesTo(dt, op, d, a, b)
	fail("ReduceTo", d)
	// dst == a: Reduce.
	a0 := append([]byte(nil), a...)
	copy(d, a)
	ReduceBytes(dt, op, d, b)
	fail("Reduce", d)
	// dst == b: ReduceTo(dst, a, dst).
	copy(d, b)
	ReduceBytesTo(dt, op, d, a, d)
	fail("ReduceTo(dst=b)", d)
	// dst == a == b: Reduce(x, x) against the reference of (a, a).
	refBytes(dt, op, want, a0, a0)
	copy(d, a0)
	ReduceBytes(dt, op, d, d)
	fail("Reduce(dst=src)", d)
}

func TestSIMDMatchesReference(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, dt := range hotTypes {
			for _, op := range allOps {
				for n := 0; n <= 300; n++ {
					checkCase(t, r, dt, op, n, (n*7)%64)
				}
				for off := 0; off < 64; off++ {
					checkCase(t, r, dt, op, 131, off)
				}
				for range 3 {
					checkCase(t, r, dt, op, 300+r.IntN(5000), r.IntN(64))
				}
			}
		}
		// Longer than one assembly call (asmChunk).
		checkCase(t, r, Float32, Sum, 2*asmChunk+37, 5)
		checkCase(t, r, BF16, Max, asmChunk+1000, 2)
	})
}

// TestOtherTypes covers the types without SIMD kernels through the public API.
func TestOtherTypes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []DType{Int8, Int16, Uint8, Uint16, Uint32, Uint64} {
		for _, op := range allOps {
			checkCase(t, r, dt, op, 77, 3)
		}
	}
	d := []uint8{200, 3}
	Reduce(Sum, d, []uint8{100, 4})
	if d[0] != 44 || d[1] != 7 {
		t.Fatalf("uint8 sum = %v, want wrapped [44 7]", d)
	}
}

// TestNaNAndZeros pins Min/Max on NaN and signed zeros, in the SIMD body
// and the scalar tail alike.
func TestNaNAndZeros(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	forEachLevel(t, func(t *testing.T) {
		cases := []struct {
			op         Op
			a, b, want float32
		}{
			{Min, nan, 1, nan}, {Min, 1, nan, nan}, {Max, nan, 1, nan}, {Max, 1, nan, nan},
			{Min, nan, nan, nan}, {Sum, 1, nan, nan},
			{Min, 0, negZero, 0}, {Min, negZero, 0, negZero}, // equal: a (dst) kept
			{Max, 0, negZero, 0}, {Max, negZero, 0, negZero},
			{Min, 2, -3, -3}, {Max, 2, -3, 2},
		}
		same := func(x, y float32) bool {
			return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
		}
		for _, c := range cases {
			const n = 67 // whole vectors and a tail at every level
			a, b := make([]float32, n), make([]float32, n)
			a64, b64 := make([]float64, n), make([]float64, n)
			ah, bh := make([]Float16, n), make([]Float16, n)
			ab, bb := make([]BFloat16, n), make([]BFloat16, n)
			for i := range n {
				a[i], b[i] = c.a, c.b
				a64[i], b64[i] = float64(c.a), float64(c.b)
				ah[i], bh[i] = F16From(c.a), F16From(c.b)
				ab[i], bb[i] = BF16From(c.a), BF16From(c.b)
			}
			Reduce(c.op, a, b)
			Reduce(c.op, a64, b64)
			Reduce(c.op, ah, bh)
			Reduce(c.op, ab, bb)
			for i := range n {
				if !same(a[i], c.want) || !same(float32(a64[i]), c.want) ||
					!same(ah[i].Float32(), c.want) || !same(ab[i].Float32(), c.want) {
					t.Fatalf("%v(%v, %v)[%d]: f32 %v f64 %v f16 %v bf16 %v, want %v",
						c.op, c.a, c.b, i, a[i], a64[i], ah[i].Float32(), ab[i].Float32(), c.want)
				}
			}
		}
	})
}

func TestLevels(t *testing.T) {
	t.Logf("active level %s; supported %v; L1D %d, L2 %d, L3 %d bytes",
		Level(), supported, L1DCacheSize(), L2CacheSize(), L3CacheSize())
	if runtime.GOARCH == "amd64" && Level() == "generic" {
		t.Log("no SIMD level: amd64 without AVX2 or built with -tags noasm")
	}
	restore, ok := useLevel(levelGeneric)
	if !ok || Level() != "generic" {
		t.Fatal("generic level must always be available")
	}
	restore()
	if got := Level(); got != supported[len(supported)-1].String() {
		t.Fatalf("restore did not run? Level() = %s", got)
	}
}

func TestNoAllocs(t *testing.T) {
	a, b := make([]float32, 1000), make([]float32, 1000)
	h, g := make([]BFloat16, 1000), make([]BFloat16, 1000)
	if n := testing.AllocsPerRun(10, func() { Reduce(Sum, a, b); Reduce(Max, h, g) }); n != 0 {
		t.Fatalf("Reduce allocates %v times a call", n)
	}
}

// TestGeneratedUpToDate checks that the committed assembly is what asmgen writes.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping go run ./asmgen")
	}
	gobin, err := exec.LookPath("go") // go test puts its GOROOT/bin first in $PATH
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	out, err := exec.Command(gobin, "run", "./asmgen", "-check").CombinedOutput()
	if err != nil {
		t.Fatalf("asmgen -check: %v\n%s", err, out)
	}
}

// FuzzReduce checks every level against the reference on fuzzed inputs; the
// seed corpus runs as a normal test.
func FuzzReduce(f *testing.F) {
	f.Add(uint8(Float32), uint8(Sum), uint8(1), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	f.Add(uint8(F16), uint8(Max), uint8(3), bytes.Repeat([]byte{0x7c, 0x01, 0x00, 0x80, 0xff, 0x7b}, 40))
	f.Add(uint8(BF16), uint8(Min), uint8(0), bytes.Repeat([]byte{0xc0, 0x7f, 0x80, 0x00, 0x01, 0x7f}, 50))
	f.Add(uint8(Int64), uint8(Min), uint8(7), bytes.Repeat([]byte{0xff, 0, 1, 0x80}, 90))
	f.Add(uint8(Float64), uint8(Prod), uint8(9), bytes.Repeat([]byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f, 1, 2, 3}, 40))
	f.Add(uint8(Int32), uint8(Prod), uint8(2), bytes.Repeat([]byte{0xff, 0xfe, 0x01, 0x7f, 0x80}, 70))
	f.Fuzz(func(t *testing.T, dtb, opb, off uint8, data []byte) {
		dt := hotTypes[int(dtb)%len(hotTypes)]
		op := allOps[int(opb)%len(allOps)]
		o := int(off) % 64
		half := len(data) / 2 / dt.Size() * dt.Size()
		buf := make([]byte, 3*half+3*64)
		a := buf[o : o+half]
		b := buf[half+64+o : 2*half+64+o]
		d := buf[2*half+128+o : 3*half+128+o]
		copy(a, data[:half])
		copy(b, data[half:2*half])
		want := make([]byte, half)
		refBytes(dt, op, want, a, b)
		for _, l := range supported {
			restore, _ := useLevel(l)
			ReduceBytesTo(dt, op, d, a, b)
			restore()
			if i, ok := sameResult(dt, d, want); !ok {
				t.Fatalf("level %s %s/%s n=%d: element %d differs", l, dt, op, half/dt.Size(), i)
			}
		}
	})
}

func ExampleReduceTo() {
	a := []float32{1, 2, 3}
	b := []float32{10, 20, 30}
	dst := make([]float32, 3)
	ReduceTo(Sum, dst, a, b)
	fmt.Println(dst)
	// Output: [11 22 33]
}
