package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/gpumux/gpumux/remote/server"
)

// health is a Source whose health is err.
type health struct{ err error }

func (health) Stats() server.Stats { return server.Stats{} }
func (h health) Health() error     { return h.err }

// TestHealthz: /healthz answers 200 "ok" while the source is healthy and
// 503 with the reason otherwise, over a real listener.
func TestHealthz(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     int
		wantBody string
	}{
		{"healthy", nil, http.StatusOK, "ok\n"},
		{"backend failed", errors.New("not serving: backend: cuInit: CUDA_ERROR_NO_DEVICE"), http.StatusServiceUnavailable, "not serving: backend: cuInit: CUDA_ERROR_NO_DEVICE\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, ln, health{tc.err}) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
			}()
			resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.code || string(body) != tc.wantBody {
				t.Errorf("GET /healthz: %d %q, want %d %q", resp.StatusCode, body, tc.code, tc.wantBody)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}
}
