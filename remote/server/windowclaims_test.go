package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

func TestWindowClaims(t *testing.T) {
	const base = proto.DevPtr(windowFirst)
	a, b := &session{id: 1}, &session{id: 2}

	c := newWindowClaims()
	if !c.try(a, base) || !c.try(a, base) || c.try(b, base) {
		t.Fatal("try: a base is its first claimer's alone")
	}
	// A live holder: an error at once, naming it.
	_, err := c.await(context.Background(), b, []proto.DevPtr{base})
	if err == nil || !strings.Contains(err.Error(), "session 1") {
		t.Fatalf("await of a live session's base: %v", err)
	}
	// A holder that is leaving: await waits for its release...
	c.leave(a)
	done := make(chan error, 1)
	go func() {
		waited, err := c.await(context.Background(), b, []proto.DevPtr{base, base + windowSize})
		if err == nil && !waited {
			err = errors.New("await says it did not wait")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("await returned before the leaving session let go: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.releaseAll(a)
	if err := <-done; err != nil {
		t.Fatalf("await after the release: %v", err)
	}
	if c.try(a, base) || c.try(a, base+windowSize) {
		t.Fatal("await did not claim both bases")
	}
	// ...until its context ends.
	c.leave(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.await(ctx, a, []proto.DevPtr{base}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await past its context: %v", err)
	}
	c.release(b, base)
	if !c.try(a, base) || c.try(a, base+windowSize) {
		t.Fatal("release gives back the one base")
	}
}
