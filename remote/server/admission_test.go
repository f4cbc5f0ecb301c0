package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
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

// TestAdmissionOfLaterTokens: a later token of an admitted ID with a
// larger quota raises the ID's admitted quota if the rise fits beside the
// other tenants', and is refused if not; one naming another GPU is refused
// while the ID is admitted (a token without a quota is not counted).
func TestAdmissionOfLaterTokens(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30)}, srv: mode.srv})
			onGPU := func(id string, quota uint64, dev int) string {
				return mint(t, testSecret, token.Claims{ID: id, Quota: quota, Device: dev, Expires: time.Now().Add(time.Hour)})
			}
			refused := func(tok, want string) {
				t.Helper()
				_, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: tok}, 0)
				if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), want) {
					t.Errorf("dial: %v, want refused with %q", err, want)
				}
			}
			e.dial(t, e.token(t, "other", 12<<30))
			e.dial(t, e.token(t, "job", 2<<30))
			refused(e.token(t, "job", 6<<30),
				"GPU 0 cannot raise token ID job's quota from 2048 MiB to 6144 MiB: the other tenants it serves hold quotas of 12288 MiB of its 16384 MiB")
			if got := e.srv.Admitted()["job"]; got != 2<<30 {
				t.Errorf("job admitted at %d MiB after a refused rise, want 2048", got>>20)
			}
			e.dial(t, e.token(t, "job", 4<<30)) // fits exactly
			if got := e.srv.Admitted()["job"]; got != 4<<30 {
				t.Errorf("job admitted at %d MiB, want 4096: its largest quota", got>>20)
			}
			e.dial(t, e.token(t, "job", 1<<30)) // a smaller one costs nothing
			refused(onGPU("job", 1<<30, 1), "token ID job is admitted on GPU 0; a token of it for GPU 1 is refused")
			e.dial(t, onGPU("job", 0, 1)) // not counted
			if got := e.srv.Stats().AdmissionsRefused; got[0] != 1 || got[1] != 1 {
				t.Errorf("admissions refused by GPU: %v, want one on each", got)
			}
		})
	}
}
