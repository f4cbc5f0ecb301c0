package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
)

// Output formats of -o/--output.
const (
	FormatTable = "table"
	FormatWide  = "wide" // the table with more columns
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// outputFormats are the values -o takes, in the order help lists them.
var outputFormats = []string{FormatTable, FormatJSON, FormatYAML, FormatWide}

// outputFlag registers -o/--output, the format a command prints its state
// in; check validates it once the flags are parsed.
func outputFlag(cmd *cobra.Command) *string {
	o := cmd.Flags().StringP("output", "o", FormatTable, "output `FORMAT`: "+strings.Join(outputFormats, ", ")+" (json and yaml have snake_case keys: docs/cli.md)")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	return o
}

// checkFormat says whether -o names a known format; a bad one is said on
// stderr.
func checkFormat(cmd, format string, stderr io.Writer) bool {
	if slices.Contains(outputFormats, format) {
		return true
	}
	fmt.Fprintf(stderr, "gpumux %s: --output %q: want %s\n", cmd, format, strings.Join(outputFormats, ", "))
	return false
}

// structured reports whether a format prints data (JSON or YAML) rather
// than a table.
func structured(format string) bool { return format == FormatJSON || format == FormatYAML }

// writeData writes v as indented JSON or as YAML with the same keys (the
// JSON field names): one schema, two notations.
func writeData(w io.Writer, format string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if format == FormatJSON {
		_, err := w.Write(buf.Bytes())
		return err
	}
	// JSON is YAML: read it as a YAML node (keeping the key order) and
	// write it in block style.
	var doc yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		return err
	}
	blockStyle(&doc)
	ye := yaml.NewEncoder(w)
	ye.SetIndent(2)
	if err := ye.Encode(&doc); err != nil {
		return err
	}
	return ye.Close()
}

// blockStyle drops the flow style ({…}, […]) that parsing JSON gives the
// node and its children, and the quotes of strings that need none.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style = 0 // the encoder quotes what would read back as another type
	} else {
		n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error { return writeData(w, FormatJSON, v) }

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// colors paints text written to w: only where w is a terminal and NO_COLOR
// (no-color.org) is unset or empty.
type colors struct{ on bool }

func colorsFor(w io.Writer) colors {
	return colors{on: isTerminal(w) && os.Getenv("NO_COLOR") == ""}
}

func (c colors) paint(code, s string) string {
	if !c.on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (c colors) red(s string) string    { return c.paint("31", s) }
func (c colors) yellow(s string) string { return c.paint("33", s) }
func (c colors) green(s string) string  { return c.paint("32", s) }
