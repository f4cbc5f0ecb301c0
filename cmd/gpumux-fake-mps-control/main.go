// Command gpumux-fake-mps-control is a stand-in for nvidia-cuda-mps-control,
// FOR TESTS AND DEMOS ONLY, on machines without a GPU: it speaks the real
// program's command line (-d, and commands on stdin such as get_server_list,
// set_default_active_thread_percentage, quit) and keeps fake state, but
// starts no MPS server and enforces nothing. The mps package's tests run the
// manager against it; point the manager at it with mps.WithControlBinary.
// Package github.com/gpumux/gpumux/mps/fakecontrol documents its commands.
package main

import (
	"os"

	"github.com/gpumux/gpumux/mps/fakecontrol"
)

func main() {
	os.Exit(fakecontrol.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
