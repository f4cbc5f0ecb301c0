package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Call is one forwarded CUDA driver call of calls.def.
type Call struct {
	Op     int
	Name   string // the CUDA symbol, e.g. cuMemAlloc_v2
	Async  bool
	Export bool
	Cache  bool
	// Uncache: a success forgets the cached replies about modules and
	// functions (see ObjectCache).
	Uncache bool
	Params  []Param
	Line    int
}

// Param is one parameter, in C signature order.
type Param struct {
	Out  bool
	Kind string
	Name string
	Size string // hostin/hostout: the parameter holding the byte count
	Len  string // out str: the parameter holding the buffer length
}

var inKinds = map[string]bool{
	"u8": true, "u32": true, "i32": true, "u64": true, "size": true, "dev": true,
	"attr": true, "fattr": true, "dptr": true,
	"ctx": true, "mod": true, "func": true, "stream": true, "event": true,
	"graph": true, "gexec": true, "node": true,
	"memh": true, "pool": true, "memprop": true,
	"str": true, "blob": true, "image": true, "hostin": true,
}

var outKinds = map[string]bool{
	"u32": true, "i32": true, "u64": true, "size": true, "f32": true, "dev": true, "dptr": true,
	"ctx": true, "mod": true, "func": true, "stream": true, "event": true,
	"graph": true, "gexec": true, "node": true,
	"memh": true, "pool": true, "memprop": true,
	"uuid": true, "str": true, "hostout": true, "blob": true,
}

var (
	lineRE  = regexp.MustCompile(`^(\d+)\s+(cu[A-Za-z0-9_]+)\s+([a-z,]+)\s*:(.*)$`)
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// parseSpec reads calls.def strictly: every error names the line.
func parseSpec(name string, r io.Reader) ([]Call, error) {
	var calls []Call
	ops := map[int]string{}
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		c.Line = n
		if prev, dup := ops[c.Op]; dup {
			return nil, fmt.Errorf("%s:%d: op %d is already %s", name, n, c.Op, prev)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("%s:%d: %s is listed twice", name, n, c.Name)
		}
		ops[c.Op], names[c.Name] = c.Name, true
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("%s: no calls", name)
	}
	return calls, nil
}

func parseLine(line string) (Call, error) {
	m := lineRE.FindStringSubmatch(line)
	if m == nil {
		return Call{}, fmt.Errorf("want `<op> <name> <flags> : <params>`, got %q", line)
	}
	op, err := strconv.Atoi(m[1])
	if err != nil || op < 1 || op > 0x7fff {
		return Call{}, fmt.Errorf("op %q: want 1..32767", m[1])
	}
	c := Call{Op: op, Name: m[2]}
	modes := 0
	for _, f := range strings.Split(m[3], ",") {
		switch f {
		case "sync":
			modes++
		case "async":
			modes++
			c.Async = true
		case "export":
			c.Export = true
		case "cache":
			c.Cache = true
		case "uncache":
			c.Uncache = true
		default:
			return Call{}, fmt.Errorf("%s: flag %q: want sync, async, export, cache or uncache", c.Name, f)
		}
	}
	if modes != 1 {
		return Call{}, fmt.Errorf("%s: want exactly one of sync and async", c.Name)
	}
	seen := map[string]bool{}
	for _, ps := range strings.Split(m[4], ";") {
		ps = strings.TrimSpace(ps)
		if ps == "" {
			continue
		}
		p, err := parseParam(ps)
		if err != nil {
			return Call{}, fmt.Errorf("%s: %w", c.Name, err)
		}
		if seen[p.Name] {
			return Call{}, fmt.Errorf("%s: parameter %s is listed twice", c.Name, p.Name)
		}
		seen[p.Name] = true
		c.Params = append(c.Params, p)
	}
	return c, c.check()
}

func parseParam(s string) (Param, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return Param{}, fmt.Errorf("parameter %q: want `<in|out> <kind> <name>`", s)
	}
	p := Param{Kind: f[1], Name: f[2]}
	switch f[0] {
	case "in":
		if !inKinds[p.Kind] {
			return Param{}, fmt.Errorf("parameter %s: kind %q is not an input kind", p.Name, p.Kind)
		}
	case "out":
		p.Out = true
		if !outKinds[p.Kind] {
			return Param{}, fmt.Errorf("parameter %s: kind %q is not an output kind", p.Name, p.Kind)
		}
	default:
		return Param{}, fmt.Errorf("parameter %q: direction %q: want in or out", s, f[0])
	}
	if !identRE.MatchString(p.Name) {
		return Param{}, fmt.Errorf("parameter name %q is not a C identifier", p.Name)
	}
	for _, a := range f[3:] {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case ok && k == "size":
			p.Size = v
		case ok && k == "len":
			p.Len = v
		default:
			return Param{}, fmt.Errorf("parameter %s: attribute %q: want size=P or len=P", p.Name, a)
		}
	}
	return p, nil
}

// check enforces the rules the generators rely on.
func (c Call) check() error {
	byName := map[string]Param{}
	for _, p := range c.Params {
		byName[p.Name] = p
	}
	streams := 0
	for _, p := range c.Params {
		if c.Async && p.Out {
			return fmt.Errorf("%s: an async call has no outputs (%s)", c.Name, p.Name)
		}
		switch {
		case p.Kind == "hostin" || p.Kind == "hostout":
			streams++
			sz, ok := byName[p.Size]
			if !ok || sz.Out || sz.Kind != "size" {
				return fmt.Errorf("%s: %s needs size=<an in size parameter>", c.Name, p.Name)
			}
		case p.Kind == "image":
			streams++
		case p.Out && p.Kind == "str":
			l, ok := byName[p.Len]
			if !ok || l.Out || l.Kind != "i32" {
				return fmt.Errorf("%s: %s needs len=<an in i32 parameter>", c.Name, p.Name)
			}
		case p.Size != "" || p.Len != "":
			return fmt.Errorf("%s: %s takes no size= or len=", c.Name, p.Name)
		}
	}
	if streams > 1 {
		return fmt.Errorf("%s: at most one streamed parameter (hostin, hostout, image)", c.Name)
	}
	if c.Cache && c.Async {
		return fmt.Errorf("%s: an async call cannot be cached", c.Name)
	}
	if c.Uncache && (c.Async || c.Cache) {
		return fmt.Errorf("%s: uncache needs a sync call that is not cached itself", c.Name)
	}
	return nil
}

// ObjectCache reports whether the call's cached replies are about a module
// or a function it takes: an uncache call forgets them.
func (c Call) ObjectCache() bool {
	if !c.Cache {
		return false
	}
	for _, p := range c.Params {
		if !p.Out && (p.Kind == "mod" || p.Kind == "func") {
			return true
		}
	}
	return false
}
