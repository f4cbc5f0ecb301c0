package quantity

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
	}{
		{"1Ki", 1 << 10},
		{"4KiB", 4 << 10},
		{"4kib", 4 << 10},
		{"1Mi", 1 << 20},
		{"1MiB", 1 << 20},
		{"1mib", 1 << 20},
		{"1MIB", 1 << 20},
		{"3Gi", 3 << 30},
		{"3 GiB", 3 << 30},
		{"3   gi", 3 << 30},
		{"16GiB", 16 << 30},
		{"2Ti", 2 << 40},
		{"2TiB", 2 << 40},
		{"0016Gi", 16 << 30},
		{"0Gi", 0},
		{"18014398509481983Ki", 1<<64 - 1<<10},
		{"16777215Ti", 1<<64 - 1<<40},
	} {
		if got, err := ParseBytes(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	for _, tt := range []struct {
		in, want string // want: the whole error
	}{
		{"", `not a memory quantity (want ` + Rule + `)`},
		{"16", `a unit is needed (want ` + Rule + `)`},
		{"16G", `unit "G" is ambiguous (want ` + Rule + `)`},
		{"16g", `unit "g" is ambiguous (want ` + Rule + `)`},
		{"80GB", `unit "GB" is ambiguous (want ` + Rule + `)`},
		{"512MB", `unit "MB" is ambiguous (want ` + Rule + `)`},
		{"512M", `unit "M" is ambiguous (want ` + Rule + `)`},
		{"4K", `unit "K" is ambiguous (want ` + Rule + `)`},
		{"4kB", `unit "kB" is ambiguous (want ` + Rule + `)`},
		{"1T", `unit "T" is ambiguous (want ` + Rule + `)`},
		{"1073741824B", `unit "B" has no binary prefix (want ` + Rule + `)`},
		{"16Pi", `unknown unit "Pi" (want ` + Rule + `)`},
		{"16Gib5", `not a memory quantity (want ` + Rule + `)`},
		{"16" + strings.Repeat("x", 100), `unknown unit "xxxxxxxxxxxxxxxx…" (want ` + Rule + `)`},
		{"1.5Gi", `not a memory quantity (want ` + Rule + `)`},
		{"-1Gi", `not a memory quantity (want ` + Rule + `)`},
		{"+1Gi", `not a memory quantity (want ` + Rule + `)`},
		{" 1Gi", `not a memory quantity (want ` + Rule + `)`},
		{"1Gi ", `not a memory quantity (want ` + Rule + `)`},
		{"Gi", `not a memory quantity (want ` + Rule + `)`},
		{"1_000Gi", `not a memory quantity (want ` + Rule + `)`},
		{"0x10Gi", `not a memory quantity (want ` + Rule + `)`},
		{"99999999999999999999Ti", `too large (want ` + Rule + `)`},
		{"18446744073709551615Ti", `too large (want ` + Rule + `)`},
		{"16777216Ti", `too large (want ` + Rule + `)`},
		{"18014398509481984Ki", `too large (want ` + Rule + `)`},
	} {
		got, err := ParseBytes(tt.in)
		if err == nil || err.Error() != tt.want || got != 0 {
			t.Errorf("ParseBytes(%q) = %d, %v\nwant error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestParseMiB(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		err  string // the whole error; "" if none
	}{
		{in: "1Mi", want: 1},
		{in: "3 GiB", want: 3072},
		{in: "2Ti", want: 2 << 20},
		{in: "1024Ki", want: 1},
		{in: "0Mi", want: 0},
		{in: "16777215Ti", want: 16777215 << 20},
		{in: "1536Ki", err: "not a whole number of MiB (want a multiple of 1024Ki, or a unit of Mi, Gi or Ti)"},
		{in: "1Ki", err: "not a whole number of MiB (want a multiple of 1024Ki, or a unit of Mi, Gi or Ti)"},
		{in: "16G", err: `unit "G" is ambiguous (want ` + Rule + `)`},
		// MiB that would fit in 64 bits, but not their bytes.
		{in: "17592186044416Mi", err: `too large (want ` + Rule + `)`},
	} {
		got, err := ParseMiB(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseMiB(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || err.Error() != tt.err || got != 0):
			t.Errorf("ParseMiB(%q) = %d, %v\nwant error %s", tt.in, got, err, tt.err)
		}
	}
}

// FuzzParseQuantity checks ParseBytes and ParseMiB against a second reading of
// the rule done with big integers: what they accept is exactly a whole number,
// spaces, and a unit Ki, Mi, Gi or Ti with an optional B in any case, whose
// bytes fit in 64 bits; every other error quotes Rule; and ParseMiB is
// ParseBytes in whole MiB.
func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"16Gi", "16 GiB", "512mib", "1536Ki", "16G", "80GB", "16", "1.5Gi", "-1Gi",
		"1073741824B", "16Pi", "18446744073709551615Ti", "16777215Ti", "", " ", "0Mi", "1Kib"} {
		f.Add(s)
	}
	shifts := map[string]uint{"ki": 10, "mi": 20, "gi": 30, "ti": 40}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		mib, mibErr := ParseMiB(s)

		// The rule, read again.
		var want *big.Int
		digits := strings.TrimRight(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
		unit := strings.ToLower(strings.TrimPrefix(s, digits))
		digits = strings.TrimRight(digits, " ")
		if n, ok := new(big.Int).SetString(digits, 10); ok && strings.Trim(digits, "0123456789") == "" && digits != "" {
			if shift, ok := shifts[strings.TrimSuffix(unit, "b")]; ok {
				want = n.Lsh(n, shift)
			}
		}
		fits := want != nil && want.IsUint64()

		switch {
		case err == nil && !fits:
			t.Fatalf("ParseBytes(%q) = %d, but the rule refuses it", s, b)
		case err == nil && want.Uint64() != b:
			t.Fatalf("ParseBytes(%q) = %d, want %s", s, b, want)
		case err != nil && fits:
			t.Fatalf("ParseBytes(%q): %v, but the rule takes it as %s bytes", s, err, want)
		case err != nil && (b != 0 || !strings.HasSuffix(err.Error(), "(want "+Rule+")")):
			t.Fatalf("ParseBytes(%q) = %d, %v: want 0 and an error quoting the rule", s, b, err)
		}

		switch {
		case err != nil && (mibErr == nil || mibErr.Error() != err.Error()):
			t.Fatalf("ParseMiB(%q) = %d, %v; ParseBytes failed with %v", s, mib, mibErr, err)
		case err == nil && b%(1<<20) == 0 && (mibErr != nil || mib<<20 != b):
			t.Fatalf("ParseMiB(%q) = %d, %v; want %d", s, mib, mibErr, b>>20)
		case err == nil && b%(1<<20) != 0 && (mibErr == nil || mib != 0):
			t.Fatalf("ParseMiB(%q) = %d, %v for %d bytes, not whole MiB", s, mib, mibErr, b)
		}

		// What it accepts, written back in Ki, reads the same.
		if err == nil {
			if again, err := ParseBytes(fmt.Sprintf("%dKi", b>>10)); err != nil || again != b {
				t.Fatalf("ParseBytes(%q) = %d, but %dKi reads as %d, %v", s, b, b>>10, again, err)
			}
		}
	})
}
