// Package testuser gives tests a second, unprivileged user to run a
// process as: the security tests check that what one user's job serves
// (sockets, shared memory, registered memory) is refused to another.
//
// The user is "gorun-test", created with useradd when the tests run as root
// and it does not exist yet, and kept afterwards (test packages run in
// parallel; one removing it could pull it from under another). Without
// root, or without useradd and the user, the test is skipped with the
// reason.
package testuser

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Name is the test user's name.
const Name = "gorun-test"

var (
	once     sync.Once
	uid, gid uint32
	skip     string
)

// Other returns the uid and gid of the test user, creating it if needed,
// or skips t.
func Other(t testing.TB) (uint32, uint32) {
	t.Helper()
	once.Do(lookup)
	if skip != "" {
		t.Skip(skip)
	}
	return uid, gid
}

// Credential is Other as a process attribute: a command run with it runs as
// the test user.
func Credential(t testing.TB) *syscall.SysProcAttr {
	t.Helper()
	u, g := Other(t)
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u, Gid: g}}
}

func lookup() {
	if os.Getuid() != 0 {
		skip = "needs root to create a second user and run a process as it"
		return
	}
	u, err := user.Lookup(Name)
	if err != nil {
		// Another test package may create it at the same moment: look
		// again whatever useradd says.
		out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", Name).CombinedOutput()
		if u, err = user.Lookup(Name); err != nil {
			skip = "cannot create the test user " + Name + ": " + string(out)
			if aerr != nil {
				skip += aerr.Error()
			}
			return
		}
	}
	u64, err1 := strconv.ParseUint(u.Uid, 10, 32)
	g64, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || u64 == 0 {
		skip = "test user " + Name + " has uid " + u.Uid + " gid " + u.Gid
		return
	}
	uid, gid = uint32(u64), uint32(g64)
}
