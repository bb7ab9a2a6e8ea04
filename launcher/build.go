package launcher

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// isGoPackage reports whether prog, found at path, names a Go package
// directory rather than a binary: a directory holding .go files, or a
// "./" path that is a directory.
func isGoPackage(prog, path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	if strings.HasPrefix(prog, "./") || strings.HasPrefix(prog, "../") {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(path, "*.go"))
	return len(m) > 0
}

// goTool finds the go command: $PATH, then $GOROOT/bin, then the usual
// install location.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, root := range []string{os.Getenv("GOROOT"), "/usr/local/go"} {
		if root == "" {
			continue
		}
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// buildPackage builds the package at dir into a binary under tmp and
// returns the binary's path.
func buildPackage(ctx context.Context, dir, tmp string) (string, error) {
	name := filepath.Base(filepath.Clean(dir))
	if name == "." || name == "/" || name == ".." {
		name = "prog"
	}
	out, err := filepath.Abs(filepath.Join(tmp, name))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrLaunch, err)
	}
	// Build from inside the package, so it builds in its own module.
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: go build %s: %v\n%s", ErrLaunch, dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
