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
	held1, made1 := c.try(a, base)
	held2, made2 := c.try(a, base)
	held3, _ := c.try(b, base)
	if !held1 || !made1 || !held2 || made2 || held3 {
		t.Fatal("try: a base is its first claimer's alone, claimed once")
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
	if held, _ := c.try(a, base); held {
		t.Fatal("await did not claim the first base")
	}
	if held, _ := c.try(a, base+windowSize); held {
		t.Fatal("await did not claim the second base")
	}
	// ...until its context ends.
	c.leave(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.await(ctx, a, []proto.DevPtr{base}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await past its context: %v", err)
	}
	c.release(b, base)
	if held, _ := c.try(a, base); !held {
		t.Fatal("release did not give back the base")
	}
	if held, _ := c.try(a, base+windowSize); held {
		t.Fatal("release gave back another base")
	}
}
