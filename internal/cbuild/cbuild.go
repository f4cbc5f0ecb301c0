package cbuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Env is what a C build needs: the module root, the compiler and the
// sanitizer flags to add to every compile.
type Env struct {
	Root     string
	CC       string
	Sanitize []string
}

// Root returns the module's root: the nearest directory at or above the
// working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Setup finds the root, the compiler and make.
func Setup() (Env, error) {
	root, err := Root()
	if err != nil {
		return Env{}, err
	}
	e := Env{Root: root, CC: "cc"}
	for _, v := range []string{"GM_CTEST_CC", "CC"} {
		if cc := os.Getenv(v); cc != "" {
			e.CC = cc
			break
		}
	}
	if _, err := exec.LookPath(e.CC); err != nil {
		return e, fmt.Errorf("no C compiler %q (install gcc, `make deps`, or set CC): %w", e.CC, err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		return e, fmt.Errorf("no make (install make, `make deps`): %w", err)
	}
	if os.Getenv("GM_CTEST_SANITIZE") != "" {
		e.Sanitize = []string{"-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"}
	}
	return e, nil
}

// Run runs a command in the module root; its output is in the error.
func (e Env) Run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = e.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Make runs `make target` in the module root with the compiler and, as
// extraVar (the target's variable for more CFLAGS), the sanitizer flags;
// vars are more NAME=value arguments.
func (e Env) Make(target, extraVar string, vars ...string) error {
	args := append([]string{"--no-print-directory", "-C", e.Root, target, "CC=" + e.CC,
		extraVar + "=" + strings.Join(e.Sanitize, " ")}, vars...)
	return e.Run("make", args...)
}

// CompileAll runs the compiler once per argument list, all at once, each
// list after cflags and the sanitizer flags; the errors are joined.
func (e Env) CompileAll(cflags []string, jobs [][]string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(append(append([]string{}, cflags...), e.Sanitize...), j...)
			errs[i] = e.Run(e.CC, args...)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Exports returns what a shared library defines and exports: its
// functions and its other symbols, each sorted by name.
func Exports(path string) (funcs, others []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range syms {
		switch {
		case s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL:
		case elf.ST_TYPE(s.Info) == elf.STT_FUNC:
			funcs = append(funcs, s.Name)
		default:
			others = append(others, s.Name)
		}
	}
	slices.Sort(funcs)
	slices.Sort(others)
	return funcs, others, nil
}
