package gpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// errNoMigMinors means the mig-minors table does not exist (no MIG support in
// the driver, or no MIG-capable GPU); instances then carry minors of -1.
var errNoMigMinors = errors.New("no nvidia-caps mig-minors table")

// migMinors maps "gpu<minor>/gi<G>/access" and "gpu<minor>/gi<G>/ci<C>/access"
// to the minor of the matching /dev/nvidia-caps/nvidia-cap<N>.
type migMinors map[string]int

// cachedMigMinors reads the driver's mig-minors table once: it is fixed while
// the driver is loaded, and thousands of lines long on a real node. A table
// that does not exist yet is looked for again next time.
func (h *Host) cachedMigMinors() (migMinors, error) {
	h.cacheMu.Lock()
	defer h.cacheMu.Unlock()
	if h.minors == nil {
		m, err := readMigMinors(h.migMinors)
		if err != nil {
			return nil, err
		}
		h.minors = m
	}
	return h.minors, nil
}

func readMigMinors(path string) (migMinors, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading MIG capability minors: %w", err)
	}
	defer f.Close()
	m, err := parseMigMinors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// parseMigMinors reads the driver's table: one "<name> <minor>" pair per line.
func parseMigMinors(r io.Reader) (migMinors, error) {
	m := migMinors{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<name> <minor>\", got %q", line, text)
		}
		minor, err := strconv.Atoi(fields[1])
		if err != nil || minor < 0 || minor > 1<<20 {
			return nil, fmt.Errorf("line %d: minor %q is not a device minor number", line, fields[1])
		}
		m[fields[0]] = minor
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// lookup returns the capability minors of GPU instance gi and its compute
// instance ci on the GPU whose device minor is gpuMinor.
func (m migMinors) lookup(gpuMinor, gi, ci int) (giMinor, ciMinor int, err error) {
	if m == nil {
		return -1, -1, errNoMigMinors
	}
	giKey := fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi)
	ciKey := fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
	giMinor, ok1 := m[giKey]
	ciMinor, ok2 := m[ciKey]
	if !ok1 || !ok2 {
		return -1, -1, fmt.Errorf("mig-minors has no entry for %s or %s: %w", giKey, ciKey, ErrNotFound)
	}
	return giMinor, ciMinor, nil
}
