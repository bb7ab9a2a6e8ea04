package launcher

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRemoteArgv(t *testing.T) {
	env := []string{"GORUN_RANK=2", "X=a b"}
	argv := []string{"/bin/prog", "it's", ""}
	got := remoteArgv([]string{"ip", "netns", "exec"}, "ns1", "/work", false, 5*time.Second, env, argv)
	want := []string{"ip", "netns", "exec", "ns1", "sh", "-c", tokenScript, "sh", "/work", "0", "5", "env", "GORUN_RANK=2", "X=a b", "/bin/prog", "it's", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("agent argv = %q\nwant %q", got, want)
	}
	got = remoteArgv([]string{"/usr/bin/ssh", "-p", "2222"}, "n1", "/my dir", true, 1500*time.Millisecond, env, argv)
	want = []string{"/usr/bin/ssh", "-p", "2222", "n1",
		"exec sh -c " + shellQuote(tokenScript) + ` sh '/my dir' 1 2 env GORUN_RANK=2 'X=a b' /bin/prog 'it'\''s' ''`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ssh argv = %q\nwant %q", got, want)
	}
	if strings.ContainsAny(tokenScript, "\n!") {
		t.Errorf("the script has a newline or '!', which csh login shells mangle")
	}
}

// shellQuote's output, read back by a real sh, is the input.
func TestShellQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range append(hostile, "plain", "a=b", "x'y'z", "'", "''", "\\'", "\t", "!") {
		out, err := exec.Command(sh, "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh read %q back as %q (%v)", s, out, err)
		}
	}
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"node1":                 "node1",
		"node1,node2":           "node1",
		"node[07-09,12]":        "node07",
		"node[3,5-6],gpu1":      "node3",
		"gpu[1-2]-ib":           "gpu1-ib",
		"rack[1-2]-node[01-04]": "rack1-node01",
		"":                      "",
		"bad[1-2":               "",
	} {
		if got := FirstHost(in); got != want {
			t.Errorf("FirstHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExportVars(t *testing.T) {
	t.Setenv("TESTVAR_SET", "v")
	got, err := exportVars([]string{"TESTVAR_SET", "A=1=2", "B="}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"TESTVAR_SET=v", "A=1=2", "B="}
	if len(got) < 3 || !reflect.DeepEqual(got[len(got)-3:], want) {
		t.Errorf("exportVars = %q, want suffix %q", got, want)
	}
	for _, bad := range []string{"TESTVAR_UNSET_XYZ", "1A=x", "A B=x", "=x", "GORUN_RANK=3", "A=x\x00y"} {
		if _, err := exportVars([]string{bad}, nil); err == nil {
			t.Errorf("exportVars accepted -x %q", bad)
		}
	}
}
