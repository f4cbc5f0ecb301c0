package namelist

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// An Entry is one name of a list and the line it is on.
type Entry struct {
	Name string
	Line int
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CIdent reports whether s is a C identifier.
func CIdent(s string) bool { return identRE.MatchString(s) }

// Read reads the list called name from r. Every name must satisfy valid;
// one that does not is an error saying it is not a <what>.
func Read(name string, r io.Reader, valid func(string) bool, what string) ([]Entry, error) {
	var out []Entry
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case !valid(line):
			return nil, fmt.Errorf("%s:%d: %q is not a %s", name, n, line, what)
		case seen[line] != 0:
			return nil, fmt.Errorf("%s:%d: %s already listed on line %d", name, n, line, seen[line])
		}
		seen[line] = n
		out = append(out, Entry{Name: line, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// ReadFile reads a list of C identifiers from a file and returns the names.
func ReadFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := Read(path, f, CIdent, "C identifier")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	return names, nil
}
