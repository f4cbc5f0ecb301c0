package mps

import (
	"strconv"
	"testing"
)

// The forms were read off a real daemon (driver 580.159.04): 4G and 4096M
// read back as 4G, 3000M as 2G.
func TestMemLimitForms(t *testing.T) {
	for _, tc := range []struct {
		mib           uint64
		set, readBack string
	}{
		{4096, "4G", "4G"},
		{3000, "3000M", "2G"},
		{1024, "1G", "1G"},
		{1536, "1536M", "1G"},
		{512, "512M", "512M"},
		{1, "1M", "1M"},
		{143771, "143771M", "140G"},
	} {
		if got := FormatMemLimit(tc.mib); got != tc.set {
			t.Errorf("FormatMemLimit(%d) = %q, want %q", tc.mib, got, tc.set)
		}
		if got := ParseMemLimit(tc.set); got != tc.mib<<20 {
			t.Errorf("ParseMemLimit(%q) = %d, want %d", tc.set, got, tc.mib<<20)
		}
		if got := DisplayMemLimit(tc.mib << 20); got != tc.readBack {
			t.Errorf("DisplayMemLimit(%d MiB) = %q, want %q", tc.mib, got, tc.readBack)
		}
	}
}

// Every value here was set with set_default_device_pinned_mem_limit 0 <value>
// on driver 580.159.04, and read back with get_default_device_pinned_mem_limit
// 0 ("" is no reply: no limit). None was refused.
func TestParseMemLimitAsTheDaemon(t *testing.T) {
	for _, tc := range []struct{ value, readBack string }{
		{"4G", "4G"}, {"4g", "4G"}, {"1g", "1G"}, {"4096M", "4G"}, {"4096m", "4G"},
		{"4GB", "4G"}, {"4Gi", "4G"}, {"4Gfoo", "4G"}, {"+4G", "4G"}, {"04G", "4G"}, {"00012M", "12M"},
		// Anything but G after the digits is MiB, and nothing after them too.
		{"4096", "4G"}, {"4194304", "4096G"}, {"4K", "4M"}, {"4k", "4M"}, {"4096K", "4G"}, {"4MB", "4M"},
		{"4T", "4M"}, {"1T", "1M"}, {"4B", "4M"}, {"4P", "4M"}, {"4M5G", "4M"},
		{"1M", "1M"}, {"1023M", "1023M"}, {"1025M", "1G"},
		// The number ends at the first character that is not a digit.
		{"4.5G", "4M"}, {"1e3G", "1M"}, {"0x10G", ""}, {"0x10", ""},
		// 0 and no digits are no limit.
		{"0G", ""}, {"0M", ""}, {"0", ""}, {"-0G", ""}, {"G", ""}, {"M", ""},
		// Negative numbers wrap around, so do bytes past 2⁶⁴, and numbers past
		// 2⁶⁴-1 are 2⁶⁴-1.
		{"-1G", "17179869183G"}, {"-4096", "17179869180G"},
		{"8589934591G", "8589934591G"}, {"8589934592G", "8589934592G"}, {"17179869184G", ""},
		{"99999999999G", "14100654079G"}, {"9223372036854775808G", ""},
		{"17592186044415M", "17179869183G"}, {"17592186044416M", ""},
		{"9223372036854775807M", "17179869183G"}, {"9223372036854775808M", ""},
		{"18446744073709551615M", "17179869183G"}, {"18446744073709551616M", "17179869183G"},
	} {
		if got := DisplayMemLimit(ParseMemLimit(tc.value)); got != tc.readBack {
			t.Errorf("%q reads back as %q, want %q (as the daemon)", tc.value, got, tc.readBack)
		}
	}
}

// FuzzMemLimit: what FormatMemLimit writes, ParseMemLimit reads back, and the
// Manager's expected reply (DisplayMemLimit of the MiB, shifted) is the one
// the daemon gives for what it was sent; ParseMemLimit never panics and
// returns whole MiB.
func FuzzMemLimit(f *testing.F) {
	for _, s := range []string{"4G", "3000M", "-1G", "18446744073709551616M", "4.5G", "", "+", "-"} {
		f.Add(s, uint64(3000))
	}
	f.Fuzz(func(t *testing.T, s string, mib uint64) {
		if b := ParseMemLimit(s); b%(1<<20) != 0 {
			t.Fatalf("ParseMemLimit(%q) = %d bytes, not whole MiB", s, b)
		}
		sent := FormatMemLimit(mib)
		if got := DisplayMemLimit(ParseMemLimit(sent)); got != DisplayMemLimit(mib<<20) {
			t.Fatalf("FormatMemLimit(%d) = %q reads back as %q, the Manager expects %q", mib, sent, got, DisplayMemLimit(mib<<20))
		}
		if mib < 1<<44 && ParseMemLimit(sent) != mib<<20 {
			t.Fatalf("FormatMemLimit(%d) = %q reads as %d bytes", mib, sent, ParseMemLimit(sent))
		}
		if _, err := strconv.ParseUint(sent[:len(sent)-1], 10, 64); err != nil {
			t.Fatalf("FormatMemLimit(%d) = %q: not a whole number and a unit", mib, sent)
		}
	})
}
