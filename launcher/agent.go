package launcher

import (
	"net"
	"os"
	"path/filepath"
	"strings"
)

// DefaultAgent starts ranks on remote hosts.
var DefaultAgent = []string{"ssh"}

// tokenScript runs on the remote host as sh -c SCRIPT sh DIR ARGV... It
// reads the job token from the first line of stdin, so the secret never
// appears in a command line (ps shows those to every user, here and
// there), changes to DIR when it exists there, and execs ARGV (the rank
// keeps the script's pid, stdin and signal dispositions). A watcher sends
// the rank SIGTERM when the agent that started the script goes away:
// killing an ssh client does not kill the remote command, but it ends the
// sshd process that is the script's parent; the watcher ends with the
// rank. One line, no "!", so csh login shells pass it on unchanged too.
const tokenScript = `IFS= read -r ` + EnvJobToken + `; export ` + EnvJobToken + `; ` +
	`[ -n "$1" ] && cd "$1" 2>/dev/null; shift; ` +
	`if [ "$PPID" -gt 1 ]; then me=$$; ( ` +
	`up() { if [ -d /proc/self ]; then [ -e "/proc/$1" ]; else kill -0 "$1"; fi 2>/dev/null; }; ` +
	`while up "$me" && up "$PPID"; do sleep 1; done; up "$me" && kill -TERM "$me" ` +
	`) </dev/null >/dev/null 2>&1 & fi; exec "$@"`

// remoteArgv is the command that starts argv on host through agent with
// the given environment ("K=V" each) in directory dir; the job token goes
// to the command's stdin, first line (see tokenScript).
//
// The agent gets the host appended and then the command, as ssh does:
//
//	AGENT... HOST sh -c SCRIPT sh DIR env K=V... PROGRAM ARGS...
//
// No shell runs on this side, and the remote sh only expands "$@": the
// user's words are its arguments, never its script. An agent whose program
// is ssh or rsh hands its arguments to the remote user's shell joined with
// spaces, so for those the command is one string, "exec" and every word
// quoted for a POSIX shell. Any other agent (e.g. "ip netns exec",
// "docker exec -i") gets the words as separate arguments and must run them
// without a shell, passing stdin through.
func remoteArgv(agent []string, host, dir string, env, argv []string) []string {
	words := make([]string, 0, 6+len(env)+len(argv))
	words = append(words, "sh", "-c", tokenScript, "sh", dir, "env")
	words = append(words, env...)
	words = append(words, argv...)
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
