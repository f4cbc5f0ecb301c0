package main

import (
	"bytes"
	"os"
	"testing"
)

// TestGeneratedFileIsCurrent fails when gpu/sim/zz_generated.funcs.go does
// not match the go-nvml version in go.mod: run go generate ./gpu/sim/.
func TestGeneratedFileIsCurrent(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../zz_generated.funcs.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Error("gpu/sim/zz_generated.funcs.go is stale: run go generate ./gpu/sim/")
	}
}
