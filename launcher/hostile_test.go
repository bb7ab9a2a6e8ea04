package launcher

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostile are strings a shell would interpret.
var hostile = []string{
	"$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "a && touch PWNED",
	"it's", `say "hi"`, "back\\slash", "new\nline", "  spaces  ", "*", "~", "",
	"$HOME", "${IFS}", "#comment", "-n", "--", "| touch PWNED", "> PWNED", "é ✓",
}

// Arguments and -x values reach the ranks byte for byte, both when gorun
// starts them itself and through ssh, which hands them to a remote shell.
func TestHostileStringsAreNotInterpreted(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		hosts []Host
		agent []string
	}{
		{"local", nil, nil},
		{"ssh", []Host{{Name: "node1", Slots: 1}, {Name: "user@node2", Slots: 1}}, []string{filepath.Join(bin, "ssh")}},
		{"ssh-on-path", []Host{{Name: "node1", Slots: 2}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.agent == nil && tc.hosts != nil {
				t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			}
			work := t.TempDir()
			t.Chdir(work) // PWNED would appear here (or in the rank's cwd, the same)
			hostileValue := strings.Join(hostile, "|")
			logs := t.TempDir()
			t.Setenv("GORUN_TEST_SSH_LOG", logs)
			out, stderr, err := runJob(t, "args", Config{NP: 2, Hosts: tc.hosts, LaunchAgent: tc.agent,
				Args: hostile, Export: []string{"TESTVAR_HOSTILE=" + hostileValue},
				Stdin: strings.NewReader("to rank 0\n$(touch PWNED)\n")})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, stderr)
			}
			lines := rankLines(t, out)
			tokens := map[string]bool{}
			for r := 0; r < 2; r++ {
				if len(lines[r]) != 1 {
					t.Fatalf("rank %d printed %q", r, lines[r])
				}
				var got struct {
					Args    []string
					Hostile string
					Cwd     string
					Token   string
					Stdin   string
				}
				if err := json.Unmarshal([]byte(lines[r][0]), &got); err != nil {
					t.Fatal(err)
				}
				if strings.Join(got.Args, "\x00") != strings.Join(hostile, "\x00") || len(got.Args) != len(hostile) {
					t.Errorf("rank %d args:\n got %q\nwant %q", r, got.Args, hostile)
				}
				if got.Hostile != hostileValue {
					t.Errorf("rank %d -x value:\n got %q\nwant %q", r, got.Hostile, hostileValue)
				}
				wantIn := ""
				if r == 0 {
					wantIn = "to rank 0\n$(touch PWNED)\n"
				}
				if got.Stdin != wantIn {
					t.Errorf("rank %d read %q from stdin, want %q", r, got.Stdin, wantIn)
				}
				if len(got.Token) != 64 {
					t.Errorf("rank %d token %q", r, got.Token)
				}
				tokens[got.Token] = true
				if got.Cwd != work {
					t.Errorf("rank %d runs in %q, want gorun's directory %q", r, got.Cwd, work)
				}
			}
			if len(tokens) != 1 {
				t.Errorf("ranks got %d different tokens", len(tokens))
			}
			// The token never travels in a command line.
			cmds, _ := filepath.Glob(filepath.Join(logs, "host-*"))
			if tc.hosts != nil && len(cmds) != 2 {
				t.Errorf("fake ssh ran %d times, want 2", len(cmds))
			}
			for _, f := range cmds {
				b, _ := os.ReadFile(f)
				for tok := range tokens {
					if strings.Contains(string(b), tok) {
						t.Errorf("the job token is in the ssh command line %q", b)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(work, "PWNED")); err == nil {
				t.Fatal("a shell ran an injected command")
			}
		})
	}
}

// Host names that an agent or a shell could interpret are refused.
func TestHostileHostNames(t *testing.T) {
	for _, h := range []string{"-oProxyCommand=touch PWNED", "a;b", "$(x)", "a b", "a\tb", "h`x`", "h|x", "h'x", "h/x"} {
		if _, err := ParseHostList(h + ":1"); err == nil {
			t.Errorf("ParseHostList accepted %q", h)
		}
		if _, err := ParseHostfile(strings.NewReader(h + " slots=1\n")); err == nil && !strings.ContainsAny(h, " \t") {
			t.Errorf("ParseHostfile accepted %q", h)
		}
	}
}

// Config.Hosts given through the Go API are refused alike, before any
// agent runs: they went to ssh's command line as they were.
func TestHostileHostNamesConfig(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	agent := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\ntouch "+ran+"\nexit 255\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"-oProxyCommand=touch PWNED", "a;b", "$(x)", "a b", "h/x"} {
		_, _, err := runJob(t, "env", Config{NP: 1, Hosts: []Host{{Name: h, Slots: 1}}, LaunchAgent: []string{agent}})
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "host name") {
			t.Errorf("host %q: %v, want a usage error about the host name", h, err)
		}
	}
	if fileExists(ran) {
		t.Errorf("the agent ran for a hostile host name")
	}
}

// Stopping an ssh rank sends it SIGTERM through a second agent command
// (signalRemote); gorun waits for it, so its output while it stops
// arrives. (TestRemoteRanksKilledAfterGrace: the SIGKILL after it.)
func TestRemoteRanksStopWithTheirAgent(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, stderr, err := runJob(t, "fail", Config{NP: 3, Hosts: []Host{{Name: "node1", Slots: 3}},
		LaunchAgent: []string{filepath.Join(bin, "ssh")},
		Export:      []string{"GORUN_TEST_DIR=" + dir, "GORUN_TEST_FAIL=1"}})
	if ExitStatus(err) != 7 {
		t.Fatalf("Run = %v, want rank 1's status 7\n%s", err, stderr)
	}
	for _, r := range []string{"0", "2"} {
		b, err := os.ReadFile(filepath.Join(dir, "pid-"+r))
		if err != nil {
			t.Fatalf("rank %s never started: %v", r, err)
		}
		pid := mustAtoi(string(b))
		gone := false
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				gone = true
				break
			}
		}
		if !gone {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("remote rank %s (pid %d) outlived its ssh client", r, pid)
		}
		if _, err := os.Stat(filepath.Join(dir, "term-"+r)); err != nil {
			t.Errorf("remote rank %s was not stopped with SIGTERM", r)
		}
		// gorun waits for the rank to stop, so its last words arrive.
		if !strings.Contains(out, "["+r+"] stopping on SIGTERM\n") {
			t.Errorf("remote rank %s's output while stopping was lost:\n%s", r, out)
		}
	}
}
