//go:build !linux

package launcher

import (
	"context"
	"errors"
	"fmt"
)

// --add-ranks needs Linux abstract sockets (addranks.go).

func canAddRanks(Config, bool, []Slot) bool { return false }

func (r *runner) offerAddRanks(context.Context, *jobEnv, func(int) *proc) func() { return func() {} }

func (r *runner) addRanks(int) ([]int, error) { return nil, errors.New("not supported on this system") }

// AddRanks is supported on Linux only.
func AddRanks(ctx context.Context, jobID string, n int) ([]int, error) {
	return nil, fmt.Errorf("%w: --add-ranks needs Linux", ErrUsage)
}
