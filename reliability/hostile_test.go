package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/launcher"
)

// The launcher's own tests cover hostile program arguments, -x values and
// host names, locally and through ssh. These add what they do not: a
// program path and a working directory full of shell syntax (locally and
// through an ssh agent, which hands a command string to a remote shell),
// hostile values of the tunables gorun forwards from its environment, and
// hostfile lines whose hostile part is not the host name.

var hostileParts = []string{"$(touch PWNED)", "`touch PWNED`", "; touch PWNED;", `"'`, "a\nb", "|touch PWNED", "&& touch PWNED"}

// fakeSSH is ssh's remote side: one command string for /bin/sh.
func fakeSSH(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "fake ssh: want HOST COMMAND, got %q\n", args)
		return 255
	}
	cmd := exec.Command("/bin/sh", "-c", args[1])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 255
	}
	return 0
}

// echoed is what the echo rank program reports.
type echoed struct {
	Args []string
	Cwd  string
	Env  map[string]string
}

func childEcho() int {
	cwd, _ := os.Getwd()
	e := echoed{Args: os.Args[1:], Cwd: cwd, Env: map[string]string{}}
	for _, k := range []string{"GORUN_ALGO", "GORUN_DEBUG", "GORUN_SOCKET_IFNAME", "REL_HOSTILE"} {
		e.Env[k] = os.Getenv(k)
	}
	b, _ := json.Marshal(e)
	fmt.Println(string(b))
	return 0
}

func TestLauncherHostilePathsAndTunables(t *testing.T) {
	self, err := selfPath()
	if err != nil {
		t.Fatal(err)
	}
	hostile := strings.Join(hostileParts, " ")
	agents := t.TempDir()
	if err := os.Symlink(self, filepath.Join(agents, "ssh")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		hosts []launcher.Host
		agent []string
	}{
		{"local", nil, nil},
		{"ssh", []launcher.Host{{Name: "node1", Slots: 1}, {Name: "user@node2", Slots: 1}}, []string{filepath.Join(agents, "ssh")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "work "+strings.Join(hostileParts, "_"))
			bin := filepath.Join(work, "bin $(touch PWNED) `touch PWNED`; x")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			prog := filepath.Join(bin, "prog;touch PWNED")
			if err := os.Symlink(self, prog); err != nil {
				t.Fatal(err)
			}
			t.Chdir(work)
			t.Setenv("GORUN_ALGO", hostile) // forwarded tunables
			t.Setenv("GORUN_DEBUG", hostile)
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err := launcher.Run(ctx, launcher.Config{NP: 2, Hosts: tc.hosts, LaunchAgent: tc.agent, Program: prog,
				Args: hostileParts, Export: []string{childEnv + "=echo", "REL_HOSTILE=" + hostile},
				UseSrun: "no", NoTag: true, KillGrace: time.Second, Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, errb.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("want 2 lines, got %q\n%s", out.String(), errb.String())
			}
			for _, l := range lines {
				var e echoed
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				if strings.Join(e.Args, "\x00") != strings.Join(hostileParts, "\x00") {
					t.Errorf("args: got %q, want %q", e.Args, hostileParts)
				}
				if e.Cwd != work {
					t.Errorf("cwd: got %q, want %q", e.Cwd, work)
				}
				for _, k := range []string{"GORUN_ALGO", "GORUN_DEBUG", "REL_HOSTILE"} {
					if e.Env[k] != hostile {
						t.Errorf("%s: got %q, want %q", k, e.Env[k], hostile)
					}
				}
			}
			filepath.Walk(filepath.Dir(work), func(p string, _ os.FileInfo, _ error) error {
				if filepath.Base(p) == "PWNED" {
					t.Errorf("a shell ran an injected command: %s exists", p)
				}
				return nil
			})
		})
	}
}

// Hostfile lines whose hostile part is a slot count, an unknown key or
// trailing text are refused with the line number, never half-read.
func TestHostfileHostileLines(t *testing.T) {
	for _, line := range []string{
		"node1 slots=1;touch PWNED", "node1 slots=$(touch PWNED)", "node1 slots=`x`", "node1 slots=1 `touch PWNED`",
		"node1 slots=1 ; touch PWNED", "node1 cmd=$(touch PWNED)", "node1 slots=1\x00", "node1\x00evil slots=1",
		"node1 slots=99999999999999999999", "node1 slots=-1", "node1 slots=0x10",
	} {
		hosts, err := launcher.ParseHostfile(strings.NewReader("ok slots=2\n" + line + "\n"))
		if err == nil {
			t.Errorf("ParseHostfile accepted %q: %+v", line, hosts)
		} else if !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: error %q does not name line 2", line, err)
		}
	}
}
