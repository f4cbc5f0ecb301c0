package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// TestAdmission: the quotas of the tenants a GPU serves never add up past
// its memory; a token that would is refused at the handshake, and is
// admitted once room comes back. Connections of one token ID count once.
func TestAdmission(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{fake: []fakecuda.Option{fakecuda.WithMemory(16 << 30)}, srv: mode.srv})
			a1 := e.dial(t, e.token(t, "a", 10<<30))
			a2 := e.dial(t, e.token(t, "a", 10<<30)) // the same tenant: no more memory
			_, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, "b", 8<<30)}, 0)
			if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), "GPU 0 cannot take a quota of 8192 MiB: the tenants it serves hold quotas of 10240 MiB of its 16384 MiB") {
				t.Fatalf("a token past the GPU's memory: %v", err)
			}
			c := e.dial(t, e.token(t, "c", 6<<30)) // fits exactly
			c.Close()
			if got := e.srv.Admitted(); got["a"] != 10<<30 {
				t.Fatalf("admitted %v, want a at 10 GiB", got)
			}
			a1.Close()
			a2.Close()
			eventually(t, "a's admission ends with its connections", func() bool { return e.srv.Admitted()["a"] == 0 })
			b := e.dial(t, e.token(t, "b", 8<<30))
			ok(t, "b, admitted once a has gone")(b.CtxSynchronize(primary(t, b)))
		})
	}
}
