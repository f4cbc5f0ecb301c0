// Command gencalls generates the remote protocol's per-call code from
// remote/proto/calls.def: the Go dispatch and client (package proto) and
// the C marshalling of the interposer. Run by `go generate ./remote/proto`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
)

func main() {
	spec := flag.String("spec", "calls.def", "the call list")
	goOut := flag.String("go", "", "write the Go code to `FILE`")
	cOut := flag.String("c", "", "write the C stubs to `FILE`")
	hOut := flag.String("h", "", "write the C header to `FILE`")
	unsupported := flag.String("unsupported", "", "read the unsupported entry points from `FILE` (with -stubs)")
	stubsOut := flag.String("stubs", "", "write the C stubs of the unsupported entry points to `FILE`")
	flag.Parse()
	if (*unsupported == "") != (*stubsOut == "") {
		fmt.Fprintln(os.Stderr, "gencalls: -unsupported and -stubs go together")
		os.Exit(2)
	}
	if err := run(*spec, *goOut, *cOut, *hOut, *unsupported, *stubsOut); err != nil {
		fmt.Fprintln(os.Stderr, "gencalls:", err)
		os.Exit(1)
	}
}

func run(spec, goOut, cOut, hOut, unsupported, stubsOut string) error {
	f, err := os.Open(spec)
	if err != nil {
		return err
	}
	defer f.Close()
	calls, err := parseSpec(spec, f)
	if err != nil {
		return err
	}
	if goOut != "" {
		src, err := format.Source([]byte(genGo(calls)))
		if err != nil {
			return fmt.Errorf("generated Go does not parse: %w", err)
		}
		if err := writeIfChanged(goOut, src); err != nil {
			return err
		}
	}
	if cOut != "" {
		if err := writeIfChanged(cOut, []byte(genC(calls))); err != nil {
			return err
		}
	}
	if hOut != "" {
		if err := writeIfChanged(hOut, []byte(genCHeader(calls))); err != nil {
			return err
		}
	}
	if unsupported != "" {
		u, err := os.Open(unsupported)
		if err != nil {
			return err
		}
		defer u.Close()
		names, err := parseUnsupported(unsupported, u, calls)
		if err != nil {
			return err
		}
		if err := writeIfChanged(stubsOut, []byte(genUnsupported(names))); err != nil {
			return err
		}
	}
	return nil
}

// writeIfChanged keeps file times (and make's rebuilds) quiet when the
// output is the same.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return os.WriteFile(path, data, 0o644)
}
