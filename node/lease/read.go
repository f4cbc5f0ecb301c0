package lease

import (
	"context"
	"errors"
	"os"
)

// ReadIn returns the leases (share ID → container) of the store in state
// directory dir, without creating a store where there is none: readers
// such as `gpumux status` and the plugin's MIG apply must not make one.
func ReadIn(ctx context.Context, dir string) (map[string]string, error) {
	path := PathIn(dir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Leases(ctx)
}
