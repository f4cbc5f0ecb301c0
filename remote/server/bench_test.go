package server_test

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// BenchmarkSmallCall measures a loop of small synchronous calls
// (cuCtxGetDevice: one frame each way, no backend work), in this process
// and through a tenant worker.
func BenchmarkSmallCall(b *testing.B) {
	for _, mode := range []struct {
		name string
		srv  []server.Option
	}{
		{"in-process", nil},
		{"tenant-process", tenantOpts()},
	} {
		b.Run(mode.name, func(b *testing.B) {
			e := start(b, envConfig{srv: mode.srv})
			cl := e.dial(b, e.token(b, "bench", 0))
			ctx := primary(b, cl)
			for b.Loop() {
				if _, r, err := cl.CtxGetDevice(ctx); err != nil || r != 0 {
					b.Fatalf("cuCtxGetDevice: %v %v", r, err)
				}
			}
		})
	}
}

// BenchmarkCopy measures 64 MiB copies each way through the server (fake
// backend, in this process, over a unix socket) beside the same bytes
// through a plain unix socket (the baseline docs/benchmarks.md compares
// with, there on a GPU).
func BenchmarkCopy(b *testing.B) {
	const n = 64 << 20
	host := make([]byte, n)
	// copyEnv is a client with an allocation of n bytes.
	copyEnv := func(b *testing.B) (*proto.Client, proto.Handle, proto.DevPtr) {
		e := start(b, envConfig{})
		cl := e.dial(b, e.token(b, "bench", 0))
		ctx := primary(b, cl)
		b.SetBytes(n)
		return cl, ctx, alloc(b, cl, ctx, n)
	}
	b.Run("htod", func(b *testing.B) {
		cl, ctx, p := copyEnv(b)
		for b.Loop() {
			upload(b, cl, ctx, p, host)
		}
	})
	b.Run("dtoh", func(b *testing.B) {
		cl, ctx, p := copyEnv(b)
		for b.Loop() {
			if r, err := cl.MemcpyDtoHV2(ctx, host, p, n); err != nil || r != 0 {
				b.Fatalf("cuMemcpyDtoH: %v %v", r, err)
			}
		}
	})
	b.Run("socket", func(b *testing.B) {
		a, c := socketPair(b)
		go func() {
			buf := make([]byte, 1<<20)
			for {
				if _, err := io.ReadFull(a, buf); err != nil {
					return
				}
			}
		}()
		b.SetBytes(n)
		for b.Loop() {
			for off := 0; off < n; off += 1 << 20 {
				if _, err := c.Write(host[off : off+1<<20]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// socketPair returns the two ends of a unix socket connection.
func socketPair(b *testing.B) (net.Conn, net.Conn) {
	dir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(); c.Close() })
	return a, c
}
