// Command genstubs writes the limiter's generated pass-through stubs
// (timeslice/limiter/zz_cuda.[ch], zz_nvml.[ch]) from the real libraries'
// export lists and the limiter's intercept lists. Run by
// `go generate ./timeslice/ctest`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumux/gpumux/timeslice/ctest"
)

func main() {
	root := flag.String("root", "../..", "the module's root")
	flag.Parse()
	for _, lib := range ctest.Libraries {
		c, h, err := ctest.Generate(*root, lib)
		if err != nil {
			fmt.Fprintln(os.Stderr, "genstubs:", err)
			os.Exit(1)
		}
		out := filepath.Join(*root, lib.Out)
		if err := os.WriteFile(out, c, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genstubs:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(strings.TrimSuffix(out, ".c")+".h", h, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genstubs:", err)
			os.Exit(1)
		}
	}
}
