//go:build e2e

package e2e

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// elfMachine is each release architecture's machine in ELF headers.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// crossArch is the release TestPackageCross builds on a machine of the
// other architecture, and the user-mode emulator (Debian's
// qemu-user-static) that runs its programs here, with the architecture's C
// library from Debian's multiarch packages (which libbearssl-dev:ARCH
// brings).
type crossArch struct {
	arch, qemu string
}

// crossOf is the release built on each architecture for the other.
var crossOf = map[string]crossArch{
	"amd64": {arch: "arm64", qemu: "qemu-aarch64-static"},
	"arm64": {arch: "amd64", qemu: "qemu-x86_64-static"},
}

// TestPackageCross builds the other architecture's release (make dist
// DIST_ARCH=arm64 on amd64) and checks it: the package's Architecture,
// every piece in the package and the tarball, every ELF file in them built
// for that architecture and stripped, and each binary's version and commit
// (run under qemu's user-mode emulation).
func TestPackageCross(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root := repoRoot(t)
	cross, ok := crossOf[runtime.GOARCH]
	if !ok {
		t.Skipf("no cross release is built on %s", runtime.GOARCH)
	}
	for _, tool := range []string{"make", "dpkg-deb", "tar", cross.qemu} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (scripts/install-deps.sh installs it)", tool, err)
		}
	}
	version, commit, debVersion := makeStamps(t, ctx, root)

	dist := t.TempDir()
	runIn(t, ctx, root, "make", "--no-print-directory", "dist", "DIST_ARCH="+cross.arch, "DIST_DIR="+dist)
	deb := filepath.Join(dist, fmt.Sprintf("gpumux_%s_%s.deb", debVersion, cross.arch))
	name := fmt.Sprintf("gpumux-%s-linux-%s", version, cross.arch)
	tarball := filepath.Join(dist, name+".tar.gz")
	for _, f := range []string{deb, tarball} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatalf("make dist DIST_ARCH=%s: %v", cross.arch, err)
		}
		t.Logf("%s: %.1f MB", filepath.Base(f), float64(st.Size())/1e6)
	}
	if got := strings.TrimSpace(runIn(t, ctx, root, "dpkg-deb", "--field", deb, "Architecture")); got != cross.arch {
		t.Errorf("control field Architecture = %q, want %q", got, cross.arch)
	}

	debRoot := t.TempDir()
	runIn(t, ctx, root, "dpkg-deb", "-x", deb, debRoot)
	tarRoot := t.TempDir()
	runIn(t, ctx, root, "tar", "-xzf", tarball, "-C", tarRoot)
	for what, dir := range map[string]string{"package": debRoot, "tarball": filepath.Join(tarRoot, name, "root")} {
		t.Run(what, func(t *testing.T) {
			for path, w := range packageFiles {
				st, err := os.Lstat(filepath.Join(dir, path))
				switch {
				case err != nil:
					t.Errorf("the %s has no %s: %v", what, path, err)
				case w.target != "" && st.Mode()&os.ModeSymlink == 0:
					t.Errorf("%s: %v, want a link to %s", path, st.Mode(), w.target)
				}
			}
			checkELFs(t, dir, elfMachine[cross.arch])
		})
	}

	t.Run("versions", func(t *testing.T) {
		for _, tc := range versionCommands(version + " (commit " + commit + ")") {
			// qemu-user finds the program's loader (/lib/ld-linux-aarch64.so.1)
			// and C library where Debian's multiarch packages put them.
			out := runIn(t, ctx, debRoot, cross.qemu, append([]string{filepath.Join(debRoot, tc.bin)}, tc.args...)...)
			if first, _, _ := strings.Cut(out, "\n"); first != tc.want {
				t.Errorf("%s %s %s: first line %q, want %q\n%s", cross.qemu, tc.bin, strings.Join(tc.args, " "), first, tc.want, out)
			}
		}
	})
}

// checkELFs fails the test unless every ELF file under dir is built for
// machine and stripped (no symbol table, no DWARF), and every binary and
// library of packageFiles is one of them.
func checkELFs(t *testing.T, dir string, machine elf.Machine) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		isELF, err := hasELFMagic(path)
		if err != nil || !isELF {
			return err
		}
		rel := strings.TrimPrefix(path, dir)
		seen[rel] = true
		f, err := elf.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if f.Machine != machine {
			t.Errorf("%s: ELF machine %v, want %v", rel, f.Machine, machine)
		}
		for _, s := range []string{".symtab", ".debug_info", ".zdebug_info"} {
			if f.Section(s) != nil {
				t.Errorf("%s: not stripped (it has %s)", rel, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, w := range packageFiles {
		if w.elf && !seen[path] {
			t.Errorf("%s is not an ELF file", path)
		}
	}
	t.Logf("%d ELF files, all %v and stripped", len(seen), machine)
}

// hasELFMagic reports whether the file starts with ELF's magic number.
func hasELFMagic(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(f, magic); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return string(magic) == elf.ELFMAG, nil
}
