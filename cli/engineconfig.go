package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// RuntimeName is the name under which `gpumux runtime configure` registers
// gpumux-runtime with an engine: `docker run --runtime gpumux`, containerd's
// runtime class (Kubernetes RuntimeClass handler) gpumux, Nomad's docker
// driver `nvidia_runtime = "gpumux"`.
const RuntimeName = "gpumux"

// runcShim is the containerd shim that runs gpumux-runtime in runc's place
// (its option BinaryName).
const runcShim = "io.containerd.runc.v2"

// runtimeEntry is what `gpumux runtime configure` puts into an engine's
// config.
type runtimeEntry struct {
	// Path is gpumux-runtime's absolute path.
	Path string
	// SetDefault also makes it the engine's default runtime.
	SetDefault bool
}

// editDockerConfig returns Docker's daemon.json src with the gpumux runtime
// added (runtimes.gpumux.path, and default-runtime with SetDefault) and the
// changes made, one line each: none when src already says so. Every other
// key is kept as it was (keys come out sorted, indented by four spaces). An
// empty src is an empty config.
func editDockerConfig(src []byte, e runtimeEntry) ([]byte, []string, error) {
	top := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(src)) > 0 {
		if err := json.Unmarshal(src, &top); err != nil {
			return nil, nil, jsonError(src, err)
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := top["runtimes"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &runtimes); err != nil {
			return nil, nil, fmt.Errorf(`"runtimes" is %s: want an object of runtimes, e.g. {"%s": {"path": "%s"}}`, jsonKind(raw), RuntimeName, e.Path)
		}
	}
	entry := map[string]json.RawMessage{}
	if raw, ok := runtimes[RuntimeName]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &entry); err != nil {
			return nil, nil, fmt.Errorf(`"runtimes"."%s" is %s: want an object such as {"path": "%s"}`, RuntimeName, jsonKind(raw), e.Path)
		}
	}
	var changes []string
	set := func(m map[string]json.RawMessage, key, name, want string) error {
		var cur string
		raw, ok := m[key]
		if ok {
			if err := json.Unmarshal(raw, &cur); err != nil {
				return fmt.Errorf("%s is %s: want a string", name, jsonKind(raw))
			}
			if cur == want {
				return nil
			}
		}
		b, err := json.Marshal(want)
		if err != nil {
			return err
		}
		m[key] = b
		changes = append(changes, describeChange(name, strconv.Quote(want), ok, strconv.Quote(cur)))
		return nil
	}
	if err := set(entry, "path", fmt.Sprintf(`"runtimes"."%s"."path"`, RuntimeName), e.Path); err != nil {
		return nil, nil, err
	}
	if e.SetDefault {
		if err := set(top, "default-runtime", `"default-runtime"`, RuntimeName); err != nil {
			return nil, nil, err
		}
	}
	if len(changes) == 0 {
		return src, nil, nil
	}
	var err error
	if runtimes[RuntimeName], err = json.Marshal(entry); err != nil {
		return nil, nil, err
	}
	if top["runtimes"], err = json.Marshal(runtimes); err != nil {
		return nil, nil, err
	}
	out, err := json.MarshalIndent(top, "", "    ")
	if err != nil {
		return nil, nil, err
	}
	return append(out, '\n'), changes, nil
}

// jsonError words a JSON syntax or type error with its line and column.
func jsonError(src []byte, err error) error {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		return fmt.Errorf("not a JSON object (the file holds %s); want {\"runtimes\": {…}, …}", typ.Value)
	}
	if off < 0 {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	line, col := 1, 1
	for _, c := range src[:min(int(off), len(src))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("not valid JSON: line %d, column %d: %w", line, col, err)
}

func isJSONNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// jsonKind names the JSON type of a value and shows it, for errors.
func jsonKind(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	kind := "a number"
	switch {
	case s == "":
		return "empty"
	case s[0] == '"':
		kind = "a string"
	case s[0] == '[':
		kind = "an array"
	case s[0] == '{':
		kind = "an object"
	case s == "true" || s == "false":
		kind = "a boolean"
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return kind + " (" + s + ")"
}

// describeChange is one line of what configure changed: "set name = want",
// with what it replaced.
func describeChange(name, want string, had bool, was string) string {
	if had {
		return fmt.Sprintf("set %s = %s (was %s)", name, want, was)
	}
	return fmt.Sprintf("set %s = %s", name, want)
}

// criRuntimePlugin is, per containerd config version, the key of the plugin
// whose `containerd` table holds the runtimes (the CRI plugin of containerd
// 1.x, called "cri" in version 1 files; its runtime half in containerd 2.x).
var criRuntimePlugin = map[int64]string{
	1: "cri",
	2: "io.containerd.grpc.v1.cri",
	3: "io.containerd.cri.v1.runtime",
}

// containerdVersions says which containerd reads which config version, for
// errors.
const containerdVersions = "2 (containerd 1.6, 1.7) or 3 (containerd 2.x)"

// editContainerdConfig returns containerd's config.toml src with the gpumux
// runtime added under the CRI plugin of the file's config version —
// runtime_type io.containerd.runc.v2 and options.BinaryName; a new runtime
// starts as a copy of the file's runc runtime, so that settings such as
// SystemdCgroup carry over — and with SetDefault the CRI default runtime
// name. It also returns the config version and the changes made, one line
// each: none when src already says so. A file with no version is version 1
// (containerd's rule); a file with no settings at all (absent, empty,
// comments only) becomes one of newVersion (0: refused, the caller must
// choose). Every other setting is kept; comments and the order of keys are
// not.
func editContainerdConfig(src []byte, e runtimeEntry, newVersion int64) ([]byte, int64, []string, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(src, &doc); err != nil {
		return nil, 0, nil, tomlError(err)
	}
	var changes []string
	version := int64(1)
	switch v, ok := doc["version"]; {
	case len(doc) == 0:
		if newVersion == 0 {
			return nil, 0, nil, fmt.Errorf("the file has no settings yet, so it says no config version: choose one with --config-version %s", containerdVersions)
		}
		version = newVersion
		doc["version"] = version
		changes = append(changes, fmt.Sprintf("set version = %d", version))
	case ok:
		n, isInt := v.(int64)
		if _, known := criRuntimePlugin[n]; !isInt || !known {
			return nil, 0, nil, fmt.Errorf("version = %v: want %s (or 1, deprecated)", tomlValue(v), containerdVersions)
		}
		version = n
	}
	if newVersion != 0 && newVersion != version {
		return nil, 0, nil, fmt.Errorf("the file is a version %d config, not version %d (--config-version): gpumux does not migrate configs; leave --config-version out, or migrate the file first (containerd 2.x: containerd config migrate)", version, newVersion)
	}

	path := []string{"plugins", criRuntimePlugin[version], "containerd"}
	ctrdKey := tomlKey(path...)
	rtKey := ctrdKey + ".runtimes." + RuntimeName
	ctrd, err := tomlTable(doc, path...)
	if err != nil {
		return nil, 0, nil, err
	}
	runtimes, err := tomlTable(ctrd, "runtimes")
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s.%w", ctrdKey, err)
	}
	rt, ok := runtimes[RuntimeName].(map[string]any)
	switch {
	case runtimes[RuntimeName] != nil && !ok:
		return nil, 0, nil, fmt.Errorf("%s is %s: want a table", rtKey, tomlValue(runtimes[RuntimeName]))
	case !ok:
		rt = map[string]any{}
		desc := "add " + rtKey
		if runc, ok := runtimes["runc"].(map[string]any); ok {
			rt = deepCopy(runc).(map[string]any)
			desc += ", a copy of runtimes.runc"
		}
		runtimes[RuntimeName] = rt
		changes = append(changes, desc)
	}
	set := func(m map[string]any, key, name, want string) error {
		cur, had := m[key]
		if s, isStr := cur.(string); had && !isStr {
			return fmt.Errorf("%s is %s: want a string", name, tomlValue(cur))
		} else if s == want {
			return nil
		}
		m[key] = want
		changes = append(changes, describeChange(name, strconv.Quote(want), had, tomlValue(cur)))
		return nil
	}
	if err := set(rt, "runtime_type", rtKey+".runtime_type", runcShim); err != nil {
		return nil, 0, nil, err
	}
	opts, err := tomlTable(rt, "options")
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s.%w", rtKey, err)
	}
	if err := set(opts, "BinaryName", rtKey+".options.BinaryName", e.Path); err != nil {
		return nil, 0, nil, err
	}
	if e.SetDefault {
		if err := set(ctrd, "default_runtime_name", ctrdKey+".default_runtime_name", RuntimeName); err != nil {
			return nil, 0, nil, err
		}
	}
	if len(changes) == 0 {
		return src, version, nil, nil
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("writing the config back as TOML: %w", err)
	}
	return out, version, changes, nil
}

// tomlTable returns the table at path below m, creating the tables that are
// missing; a key on the way that holds something else is an error naming
// it.
func tomlTable(m map[string]any, path ...string) (map[string]any, error) {
	for i, k := range path {
		v, ok := m[k]
		if !ok {
			next := map[string]any{}
			m[k] = next
			m = next
			continue
		}
		next, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is %s: want a table", tomlKey(path[:i+1]...), tomlValue(v))
		}
		m = next
	}
	return m, nil
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tomlKey writes a dotted TOML key, quoting the parts that need it:
// plugins."io.containerd.grpc.v1.cri".containerd.
func tomlKey(parts ...string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		if bareKey.MatchString(p) {
			q[i] = p
		} else {
			q[i] = strconv.Quote(p)
		}
	}
	return strings.Join(q, ".")
}

// tomlValue shows a decoded TOML value with its type, for errors and
// change lines.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	case []any:
		return "an array"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%v", v)
	}
}

// tomlError words a TOML decoding error with its line and column.
func tomlError(err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Errorf("not valid TOML: line %d, column %d: %w", row, col, err)
	}
	return fmt.Errorf("not valid TOML: %w", err)
}

// deepCopy copies a decoded TOML value: tables and arrays are new, leaves
// shared.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = deepCopy(x)
		}
		return s
	default:
		return v
	}
}

// containerdMajor matches the version field of `containerd --version`:
// "1.6.20~ds1", "v2.0.0", "1.7.27".
var containerdMajor = regexp.MustCompile(`^v?([0-9]+)\.[0-9]+`)

// installedContainerdConfigVersion is the config version the containerd on
// PATH writes and reads by default (`containerd config default`): 2 for
// containerd 1.x, 3 for 2.x.
func installedContainerdConfigVersion(ctx context.Context) (int64, error) {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return 0, fmt.Errorf("no containerd on PATH to ask which config version it reads: %w", err)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", bin, err)
	}
	// "containerd github.com/containerd/containerd 1.6.20~ds1 <revision>"
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		if m := containerdMajor.FindStringSubmatch(f[2]); m != nil {
			switch m[1] {
			case "1":
				return 2, nil
			case "2":
				return 3, nil
			}
		}
	}
	return 0, fmt.Errorf("%s --version says %q: not containerd 1.x or 2.x", bin, strings.TrimSpace(string(out)))
}
