package launcher

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultAgent starts ranks on remote hosts.
var DefaultAgent = []string{"ssh"}

// tokenScript runs on the remote host as
//
//	sh -c SCRIPT sh DIR STRICT GRACE ARGV...
//
// It reads the job token from the first line of stdin, so the secret never
// appears in a command line (ps shows those to every user, here and
// there), and changes to DIR: when that fails, with STRICT "1" (-wdir) it
// prints a wdir marker and exits 1, else (gorun's own directory, which the
// host may lack) it stays in the login directory.
//
// Under ssh the script leads its process group (sshd starts every session
// in a new one). It then prints a pid marker, runs ARGV in the foreground,
// so that the rank keeps its stdin and signal dispositions, and prints an
// exit or signal marker (runQuiet) before exiting with the shell's status
// (128+N for signal N): ssh reports a remote death by signal as 255, its
// own failure's status, and the marker tells the two apart. gorun stops such a rank
// through the agent, "kill -s SIG -- -PGID", and waits for its session
// to end, so nothing the rank prints while it stops is lost (signalRemote).
// Under another agent, where the script may share a process group, it
// execs ARGV, which keeps the script's pid.
//
// A watcher ends the rank when the agent that started the script goes away
// (gorun died, or the connection broke): killing an ssh client does not
// kill the remote command, but it ends the sshd process that is the
// script's parent. The watcher sends SIGTERM, and SIGKILL GRACE seconds
// later (--kill-grace), to the process group, which it belongs to (so its
// id is not reused), or to the exec'd rank. One line, no "!", so csh login
// shells pass it on unchanged too. Markers: marker.go.
const tokenScript = `IFS= read -r ` + EnvJobToken + `; export ` + EnvJobToken + `; ` +
	`if [ -n "$1" ]; then cd "$1" 2>/dev/null || if [ "$2" = 1 ]; then printf '\036gorun:wdir\n' >&2; exit 1; fi; fi; ` +
	`g=$3; shift 3; me=$$; t=$me; L=; if kill -0 -$me 2>/dev/null; then L=1; t=-$me; fi; ` +
	`if [ "$PPID" -gt 1 ]; then ( trap '' TERM USR1 USR2; ` +
	`up() { if [ -d /proc/self ]; then [ -e "/proc/$1" ]; else kill -0 "$1"; fi 2>/dev/null; }; ` +
	`while up "$me" && up "$PPID"; do sleep 1; done; ` +
	`if up "$me"; then kill -s TERM -- $t; sleep "$g"; if [ -n "$L" ] || up "$me"; then kill -s KILL -- $t; fi; fi ` +
	`) </dev/null >/dev/null 2>&1 & fi; ` +
	`if [ -n "$L" ]; then trap : TERM USR1 USR2; printf '\036gorun:pid %s\n' "$me" >&2; ` + runQuiet + `; ` +
	`printf '\036gorun:%s %s\n' "$k" "$n" >&2; exit "$s"; fi; exec "$@"`

// runQuiet is the part of a wrapper script (tokenScript, srunTaskScript)
// that runs "$@" in the foreground and sets s to its status as a shell
// gives it (128+N for signal N), and k and n to what the exit or signal
// marker says: "exit" and the status, or "signal" and N.
//
// $? alone cannot tell exit(138) from SIGUSR1 (10). The shell that waits
// for the program can: dash, bash and busybox sh print a notice ("User
// defined signal 1", "Killed") on their stderr when the program they wait
// for dies of a signal, and print nothing when it exits. That shell's
// stderr and stdout go to a command substitution that gets the notice, if
// any, then "=STATUS"; anything before the status means a signal. The
// program gets the real stdout and stderr back (fds 4 and 3), and default
// signal dispositions but those the script inherited ignored. Those shells
// print no notice for SIGINT and SIGPIPE, so 130 and 141 stay ambiguous
// and are read as signals 2 and 13, as before (a program dies of those far
// more often than it exits with their numbers); a waiting shell that dies
// itself (a signal to the whole group that it does not trap) leaves no
// status, and its own death stands for the program's. Both shells survive
// SIGTERM, so that a program that ignores it is still waited for, and
// SIGUSR1 and SIGUSR2, which gorun passes on to the program's whole
// process group. The outer shell's read of the substitution survives them
// too (dash, bash and busybox sh retry it after the trap).
const runQuiet = `{ r=$(sh -c 'trap : TERM USR1 USR2; ( exec 1>&4 2>&3 3>&- 4>&-; exec "$@" ); echo "=$?"' sh "$@" 3>&2 2>&1); } 4>&1; s=$?; ` +
	`case $r in *=*) s=${r##*=};; esac; ` +
	`if [ "$s" -le 128 ] || [ "$s" -ge 193 ] || { [ "$r" = "=$s" ] && [ "$s" -ne 130 ] && [ "$s" -ne 141 ]; }; then k=exit; n=$s; ` +
	`else k=signal; n=$((s-128)); fi`

// remoteArgv is the command that starts argv on host through agent with
// the given environment ("K=V" each) in directory dir (strict: -wdir, an
// error when missing there); the job token goes to the command's stdin,
// first line (see tokenScript). grace is --kill-grace.
//
// The agent gets the host appended and then the command, as ssh does:
//
//	AGENT... HOST sh -c SCRIPT sh DIR STRICT GRACE env K=V... PROGRAM ARGS...
//
// No shell runs on this side, and the remote sh only expands "$@": the
// user's words are its arguments, never its script. An agent whose program
// is ssh or rsh hands its arguments to the remote user's shell joined with
// spaces, so for those the command is one string, "exec" and every word
// quoted for a POSIX shell. Any other agent (e.g. "ip netns exec",
// "docker exec -i") gets the words as separate arguments and must run them
// without a shell, passing stdin through.
func remoteArgv(agent []string, host, dir string, strict bool, grace time.Duration, env, argv []string) []string {
	words := make([]string, 0, 8+len(env)+len(argv))
	words = append(words, "sh", "-c", tokenScript, "sh", dir, strictFlag(strict), graceSeconds(grace), "env")
	words = append(words, env...)
	words = append(words, argv...)
	return agentArgv(agent, host, words)
}

// agentArgv is the command that runs words on host through agent.
func agentArgv(agent []string, host string, words []string) []string {
	out := append(append([]string(nil), agent...), host)
	if !isShellAgent(agent) {
		return append(out, words...)
	}
	var b strings.Builder
	b.WriteString("exec")
	for _, w := range words {
		b.WriteString(" " + shellQuote(w))
	}
	return append(out, b.String())
}

func strictFlag(strict bool) string {
	if strict {
		return "1"
	}
	return "0"
}

// graceSeconds is d in whole seconds, rounded up, at least 1: what sleep(1)
// takes everywhere.
func graceSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

// isShellAgent reports whether the agent passes its command to a remote
// shell as one string.
func isShellAgent(agent []string) bool {
	if len(agent) == 0 {
		return false
	}
	switch filepath.Base(agent[0]) {
	case "ssh", "rsh", "autossh":
		return true
	}
	return false
}

// shellQuote quotes s as one word for a POSIX shell.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			strings.ContainsRune("_-+=.,/:@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isLocalHost reports whether host names this machine, in which case its
// ranks start directly, without the agent (as mpirun does).
func isLocalHost(host string) bool {
	switch host {
	case "", "localhost", "127.0.0.1", "::1":
		return true
	}
	if name, err := os.Hostname(); err == nil && (host == name || strings.HasPrefix(name, host+".")) {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// outboundIP is this machine's address on the route to host, the address
// remote ranks use to reach the launcher and a local rank 0.
func outboundIP(host string) (string, error) {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// remoteKillWait bounds a SIGKILL to a remote rank: the agent command
// that sends it and waits for the group to be gone; after it gorun kills
// the rank's local agent.
const remoteKillWait = 5 * time.Second

// goneScript, after "kill -s KILL -- -PGID", waits (at most 5 s) until no
// process of group PGID is left but zombies: the wrapper that would reap
// the rank is in the group and dies with it, and a large process takes a
// while to tear down after SIGKILL, so the session's end does not mean
// the rank is gone. Where ps is missing, it does not wait. %[1]d is PGID.
const goneScript = `; i=0; while [ $i -lt 50 ] && ps -e -o pgid=,stat= 2>/dev/null | ` +
	`awk -v g=%[1]d '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; do sleep 0.1; i=$((i+1)); done`

// signalRemote sends sig to the process group pgid on host through agent
// (a second connection: ssh forwards no signals), leaving the rank's own
// agent process, local, to end with the rank (ended is closed once it
// has), so that its last output arrives. The command is bounded by grace;
// a SIGTERM that could not be delivered so falls back to signalling
// local, whose end the script's watcher turns into SIGTERM and, after
// grace, SIGKILL. A SIGKILL's command also waits for the group to be gone
// (goneScript; both within remoteKillWait), then gorun waits for local to
// end, and kills it at remoteKillWait: gorun must not return while the
// rank still runs (TestRemoteRanksKilledAfterGrace failed so under load).
// A signal that does not stop the rank (SIGUSR1, SIGUSR2) has no
// fallback: it would end local, and so the rank.
func signalRemote(agent []string, host string, pgid int, local *os.Process, ended <-chan struct{}, sig syscall.Signal, grace time.Duration) {
	wait := grace
	if sig == syscall.SIGKILL {
		wait = remoteKillWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	script := "kill -s " + name + " -- -" + strconv.Itoa(pgid)
	if sig == syscall.SIGKILL {
		script += fmt.Sprintf(goneScript, pgid)
	}
	a := agentArgv(agent, host, []string{"sh", "-c", script})
	cmd := exec.CommandContext(ctx, a[0], a[1:]...)
	cmd.Env = localEnv(nil)
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err != nil && !stops(sig) {
		return // the local agent would die of it, and the rank with it
	}
	if err == nil && sig == syscall.SIGKILL {
		select {
		case <-ended:
			return
		case <-ctx.Done():
		}
	}
	if err != nil || sig == syscall.SIGKILL {
		local.Signal(sig)
	}
}
