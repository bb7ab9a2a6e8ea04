package launcher

import (
	"strings"
	"testing"
)

func TestBindWarning(t *testing.T) {
	if w := bindWarning("core", map[int][]int{0: {0}, 1: {1}}); w != "" {
		t.Errorf("one core each: %q", w)
	}
	w := bindWarning("core", map[int][]int{0: {0}, 1: {1}, 2: {0}, 3: {1}})
	if !strings.Contains(w, "4 local ranks on 2 CPUs") || !strings.Contains(w, "[2 3]") {
		t.Errorf("4 ranks on 2 cores: %q", w)
	}
	if w := bindWarning("numa", map[int][]int{0: {0, 1}, 1: {0, 1}}); w != "" {
		t.Errorf("numa binding shares a node by design: %q", w)
	}
}
