//go:build cgo

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// abiDigest is headerDigest of include/gorun.h at GORUN_ABI_VERSION
// abiVersion. A change to what the header declares changes it; then
// GORUN_ABI_VERSION, abiVersion and python/gorun/_lib.py's ABI_VERSION
// grow by one, and this is set to the new digest.
const abiDigest = "6b36720aea81b1b8"

var (
	headerComments = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	headerVersion  = regexp.MustCompile(`(?m)^#define GORUN_ABI_VERSION (\d+)\n`)
)

// headerDigest hashes what a header declares: its text without comments,
// the version's own #define and differences of white space.
func headerDigest(h string) string {
	text := headerComments.ReplaceAllString(h, "")
	text = headerVersion.ReplaceAllString(text, "")
	sum := sha256.Sum256([]byte(strings.Join(strings.Fields(text), " ")))
	return hex.EncodeToString(sum[:8])
}

// TestABIVersion: gorun_abi_version returns gorun.h's GORUN_ABI_VERSION,
// and the version grows whenever the header's declarations change (a
// binding checks the version to refuse a library it would call with
// other arguments). TestCProgramAgainstHeader checks the built library's
// answer against the macro a C program sees.
func TestABIVersion(t *testing.T) {
	b, err := os.ReadFile("../include/gorun.h")
	if err != nil {
		t.Fatal(err)
	}
	h := string(b)
	m := headerVersion.FindStringSubmatch(h)
	if m == nil {
		t.Fatal("include/gorun.h has no line #define GORUN_ABI_VERSION N")
	}
	if v, _ := strconv.Atoi(m[1]); v != abiVersion || int(gorun_abi_version()) != v {
		t.Errorf("gorun.h's GORUN_ABI_VERSION is %d, capi's abiVersion %d, gorun_abi_version() %d",
			v, abiVersion, gorun_abi_version())
	}
	if d := headerDigest(h); d != abiDigest {
		t.Errorf("include/gorun.h's declarations are not those of ABI version %d (digest %s, not %s): make "+
			"GORUN_ABI_VERSION, capi's abiVersion and python/gorun/_lib.py's ABI_VERSION %d, and abiDigest %q",
			abiVersion, d, abiDigest, abiVersion+1, d)
	}
	// A comment or spacing is no change; a signature is.
	const decl = "#define GORUN_ABI_VERSION 1\nint gorun_barrier(gorun_comm comm);\n"
	for _, c := range []struct {
		h    string
		same bool
	}{
		{"#define GORUN_ABI_VERSION 2\n/* waits */ int  gorun_barrier(gorun_comm comm);  // all\n", true},
		{"#define GORUN_ABI_VERSION 1\nint gorun_barrier(gorun_comm comm, int flags);\n", false},
	} {
		if same := headerDigest(c.h) == headerDigest(decl); same != c.same {
			t.Errorf("headerDigest(%q) == headerDigest(%q) is %v", c.h, decl, same)
		}
	}
}
