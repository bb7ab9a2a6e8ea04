// Command asmgen writes the amd64 SIMD reduction kernels of package kernels:
// reduce_amd64.s (the assembly) and kernels_amd64.go (their declarations and
// dispatch tables). Run it with `go generate ./internal/kernels`.
//
// Every kernel has the signature func(dst, a, b *T, n int) and computes
// dst[i] = a[i] op b[i] for i < n rounded down to whole vectors; the Go side
// does the tail. dst may equal a or b (element by element in place), but
// must not otherwise overlap them.
//
// It is a plain Go program rather than an avo generator so that it needs no
// module outside the standard library.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// level is one SIMD instruction-set level.
type level struct {
	name  string // suffix of the function names: AVX2, AVX512
	reg   string // vector register prefix: Y or Z
	bytes int    // vector width in bytes
	nregs int    // vector registers available
}

var (
	avx2   = level{"AVX2", "Y", 32, 16}
	avx512 = level{"AVX512", "Z", 64, 32}
)

// elem is one element type.
type elem struct {
	name   string // F32, F64, I32, I64, F16, BF16
	goType string
	size   int    // bytes in memory
	suffix string // PS, PD (float instructions); empty for integers and halves compute as PS
	isInt  bool
	half   string // "f16" or "bf16" for the half types
}

var elems = []elem{
	{name: "F32", goType: "float32", size: 4, suffix: "PS"},
	{name: "F64", goType: "float64", size: 8, suffix: "PD"},
	{name: "I32", goType: "int32", size: 4, isInt: true},
	{name: "I64", goType: "int64", size: 8, isInt: true},
	{name: "F16", goType: "Float16", size: 2, suffix: "PS", half: "f16"},
	{name: "BF16", goType: "BFloat16", size: 2, suffix: "PS", half: "bf16"},
}

var ops = []string{"sum", "prod", "min", "max"}

// kernel is one generated function.
type kernel struct {
	lv     level
	el     elem
	op     string
	lanes  int // elements per vector
	unroll int
}

func (k kernel) name() string {
	return k.op + k.el.name + k.lv.name
}

// supported reports whether the level has a cheap form of the op.
func supported(lv level, el elem, op string) bool {
	if lv.name == "AVX2" && el.name == "I64" && op == "prod" {
		return false // no 64-bit multiply before AVX-512DQ
	}
	return true
}

func (k kernel) r(i int) string { return fmt.Sprintf("%s%d", k.lv.reg, i) }

// body emits the instructions for vector slot s of an unrolled block whose
// inputs start at byte offset off (the output has the same offset).
func (k kernel) body(s, off int) []string {
	lv, el := k.lv, k.el
	avx512 := lv.name == "AVX512"
	// Register plan per slot: x (a, then the result), y (b), t, u.
	x, y, t, u := k.r(4*s), k.r(4*s+1), k.r(4*s+2), k.r(4*s+3)
	kr := fmt.Sprintf("K%d", s+1)
	ain, bin, out := fmt.Sprintf("%d(SI)", off), fmt.Sprintf("%d(DX)", off), fmt.Sprintf("%d(DI)", off)
	var c []string
	emit := func(f string, a ...any) { c = append(c, fmt.Sprintf(f, a...)) }

	// Load a and b (as float32 for the halves).
	switch el.half {
	case "f16":
		emit("VCVTPH2PS %s, %s", ain, x)
		emit("VCVTPH2PS %s, %s", bin, y)
	case "bf16":
		emit("VPMOVZXWD %s, %s", ain, x)
		emit("VPMOVZXWD %s, %s", bin, y)
		emit("VPSLLD $16, %s, %s", x, x)
		emit("VPSLLD $16, %s, %s", y, y)
	default:
		emit("VMOVUPS %s, %s", ain, x)
		emit("VMOVUPS %s, %s", bin, y)
	}

	// x = x op y.
	if el.isInt {
		w := map[string]string{"I32": "D", "I64": "Q"}[el.name]
		switch k.op {
		case "sum":
			emit("VPADD%s %s, %s, %s", w, y, x, x)
		case "prod":
			emit("VPMULL%s %s, %s, %s", w, y, x, x)
		case "min", "max":
			if w == "Q" && !avx512 {
				// No VPMINSQ/VPMAXSQ: compare and blend.
				if k.op == "min" {
					emit("VPCMPGTQ %s, %s, %s", y, x, t) // t = x > y
				} else {
					emit("VPCMPGTQ %s, %s, %s", x, y, t) // t = y > x
				}
				emit("VPBLENDVB %s, %s, %s, %s", t, y, x, x) // x = t ? y : x
			} else {
				emit("VP%sS%s %s, %s, %s", strings.ToUpper(k.op), w, y, x, x)
			}
		}
	} else {
		sf := el.suffix
		switch k.op {
		case "sum":
			emit("VADD%s %s, %s, %s", sf, y, x, x)
		case "prod":
			emit("VMUL%s %s, %s, %s", sf, y, x, x)
		case "min", "max":
			// x = y < x ? y : x (min) or y > x ? y : x (max): a NaN in x
			// stays; then a NaN in y replaces x, so NaN propagates.
			emit("VCMP%s $3, %s, %s, %s", sf, y, y, pick(avx512, kr, t)) // unordered: y is NaN
			emit("V%s%s %s, %s, %s", strings.ToUpper(k.op), sf, x, y, x)
			if avx512 {
				emit("VMOVA%s %s, %s, %s", sf, y, kr, x)
			} else {
				emit("VBLENDV%s %s, %s, %s, %s", sf, t, y, x, x)
			}
		}
	}

	// Store.
	switch el.half {
	case "f16":
		emit("VCVTPS2PH $0, %s, %s", x, out) // round to nearest even
	case "bf16":
		// Round to nearest even: (x + 0x7fff + (x>>16)&1) >> 16; a NaN
		// becomes (x>>16) | 0x40 (quiet). Constants: ones, bias, quiet.
		one, bias, quiet := k.r(lv.nregs-3), k.r(lv.nregs-2), k.r(lv.nregs-1)
		if avx512 {
			emit("VCMPPS $3, %s, %s, %s", x, x, kr)
			emit("VPSRLD $16, %s, %s", x, t)
			emit("VPANDD %s, %s, %s", one, t, u)
			emit("VPADDD %s, %s, %s", bias, u, u)
			emit("VPADDD %s, %s, %s", x, u, u)
			emit("VPSRLD $16, %s, %s", u, u)
			emit("VPORD %s, %s, %s", quiet, t, t)
			emit("VMOVDQA32 %s, %s, %s", t, kr, u)
			emit("VPMOVDW %s, %s", u, out)
		} else {
			emit("VCMPPS $3, %s, %s, %s", x, x, y) // y = nan mask
			emit("VPSRLD $16, %s, %s", x, t)
			emit("VPAND %s, %s, %s", one, t, u)
			emit("VPADDD %s, %s, %s", bias, u, u)
			emit("VPADDD %s, %s, %s", x, u, u)
			emit("VPSRLD $16, %s, %s", u, u)
			emit("VPOR %s, %s, %s", quiet, t, t)
			emit("VBLENDVPS %s, %s, %s, %s", y, t, u, u)
			xu, xt := "X"+u[1:], "X"+t[1:]
			emit("VEXTRACTI128 $1, %s, %s", u, xt)
			emit("VPACKUSDW %s, %s, %s", xt, xu, xu)
			emit("VMOVDQU %s, %s", xu, out)
		}
	default:
		emit("VMOVUPS %s, %s", x, out)
	}
	return c
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func (k kernel) emit(w *bytes.Buffer) {
	step := k.lanes * k.el.size // bytes per vector, in memory
	block := k.lanes * k.unroll
	n := k.name()
	fmt.Fprintf(w, "// func %s(dst, a, b *%s, n int)\n", n, k.el.goType)
	fmt.Fprintf(w, "TEXT ·%s(SB), NOSPLIT, $0-32\n", n)
	fmt.Fprintf(w, "\tMOVQ dst+0(FP), DI\n\tMOVQ a+8(FP), SI\n\tMOVQ b+16(FP), DX\n\tMOVQ n+24(FP), CX\n")
	if k.el.half == "bf16" {
		nr := k.lv.nregs
		fmt.Fprintf(w, "\tVPBROADCASTD bf16one<>(SB), %s\n", k.r(nr-3))
		fmt.Fprintf(w, "\tVPBROADCASTD bf16bias<>(SB), %s\n", k.r(nr-2))
		fmt.Fprintf(w, "\tVPBROADCASTD bf16quiet<>(SB), %s\n", k.r(nr-1))
	}
	fmt.Fprintf(w, "block:\n\tCMPQ CX, $%d\n\tJB   tail\n", block)
	for s := 0; s < k.unroll; s++ {
		for _, ins := range k.body(s, s*step) {
			fmt.Fprintf(w, "\t%s\n", ins)
		}
	}
	fmt.Fprintf(w, "\tADDQ $%d, SI\n\tADDQ $%d, DX\n\tADDQ $%d, DI\n\tSUBQ $%d, CX\n\tJMP  block\n", step*k.unroll, step*k.unroll, step*k.unroll, block)
	fmt.Fprintf(w, "tail:\n\tCMPQ CX, $%d\n\tJB   done\n", k.lanes)
	for _, ins := range k.body(0, 0) {
		fmt.Fprintf(w, "\t%s\n", ins)
	}
	fmt.Fprintf(w, "\tADDQ $%d, SI\n\tADDQ $%d, DX\n\tADDQ $%d, DI\n\tSUBQ $%d, CX\n\tJMP  tail\n", step, step, step, k.lanes)
	fmt.Fprintf(w, "done:\n\tVZEROUPPER\n\tRET\n\n")
}

func kernels() []kernel {
	var ks []kernel
	for _, lv := range []level{avx2, avx512} {
		for _, el := range elems {
			for _, op := range ops {
				if !supported(lv, el, op) {
					continue
				}
				lanes := lv.bytes / el.size
				if el.half != "" {
					lanes = lv.bytes / 4 // computed as float32
				}
				unroll := 4
				if lv.name == "AVX2" && (el.half == "bf16" || op == "min" || op == "max") {
					unroll = 3 // 4 registers a slot, 16 registers, 3 constants
				}
				ks = append(ks, kernel{lv: lv, el: el, op: op, lanes: lanes, unroll: unroll})
			}
		}
	}
	return ks
}

const header = "// Code generated by asmgen; DO NOT EDIT.\n\n//go:build !noasm\n\n"

func genAsm() []byte {
	var w bytes.Buffer
	w.WriteString(header)
	w.WriteString("#include \"textflag.h\"\n\n")
	w.WriteString("DATA bf16one<>+0(SB)/4, $1\nGLOBL bf16one<>(SB), RODATA|NOPTR, $4\n")
	w.WriteString("DATA bf16bias<>+0(SB)/4, $0x7fff\nGLOBL bf16bias<>(SB), RODATA|NOPTR, $4\n")
	w.WriteString("DATA bf16quiet<>+0(SB)/4, $0x40\nGLOBL bf16quiet<>(SB), RODATA|NOPTR, $4\n\n")
	for _, k := range kernels() {
		k.emit(&w)
	}
	return w.Bytes()
}

func genGo() []byte {
	var w bytes.Buffer
	w.WriteString(header)
	w.WriteString("package kernels\n\n")
	ks := kernels()
	for _, k := range ks {
		fmt.Fprintf(&w, "//go:noescape\nfunc %s(dst, a, b *%s, n int)\n\n", k.name(), k.el.goType)
	}
	for _, lv := range []level{avx2, avx512} {
		fmt.Fprintf(&w, "// set%s fills s with the %s kernels.\nfunc set%s(s *kernelSet) {\n", lv.name, lv.name, lv.name)
		for _, el := range elems {
			field := strings.ToLower(el.name)
			var lanes int
			for _, op := range ops {
				for _, k := range ks {
					if k.lv == lv && k.el == el && k.op == op {
						fmt.Fprintf(&w, "\ts.%s.fn[%s] = %s\n", field, opConst(op), k.name())
						lanes = k.lanes
					}
				}
			}
			fmt.Fprintf(&w, "\ts.%s.fn[Avg] = s.%s.fn[Sum]\n\ts.%s.lanes = %d\n", field, field, field, lanes)
		}
		w.WriteString("}\n\n")
	}
	src, err := format.Source(w.Bytes())
	if err != nil {
		log.Fatalf("asmgen: formatting Go: %v", err)
	}
	return src
}

func opConst(op string) string { return strings.ToUpper(op[:1]) + op[1:] }

func main() {
	dir := flag.String("dir", ".", "directory of package kernels")
	check := flag.Bool("check", false, "only check that the files are up to date")
	flag.Parse()
	files := map[string][]byte{
		"reduce_amd64.s":   genAsm(),
		"kernels_amd64.go": genGo(),
	}
	stale := false
	for name, want := range files {
		p := filepath.Join(*dir, name)
		if *check {
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, want) {
				fmt.Fprintf(os.Stderr, "asmgen: %s is stale; run go generate\n", p)
				stale = true
			}
			continue
		}
		if err := os.WriteFile(p, want, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if stale {
		os.Exit(1)
	}
}
