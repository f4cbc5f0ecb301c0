package mps

import (
	"fmt"
	"math"
)

// NVIDIA's format for an MPS pinned device memory limit: NVIDIA's wire
// format, not a gpumux user input (those follow quantity.Rule).
// nvidia-cuda-mps-control's set_default_device_pinned_mem_limit <dev> <value>
// takes it, and, by NVIDIA's MPS documentation, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// takes a comma-separated list of <dev>=<value> (0=4G,1=512M). NVIDIA
// documents the value as a whole number followed by G or M, which the daemon
// takes as GiB and MiB (4096M reads back as 4G).
//
// What the daemon does with other values was read off driver 580.159.04 (see
// ParseMemLimit): it refuses none, so a malformed value is a wrong limit, not
// an error. gpumux writes only the documented form: the Manager sends
// FormatMemLimit's output, and the provider's Edits set
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT to "0=" and FormatMemLimit's output.

// FormatMemLimit writes a limit of mib MiB as NVIDIA documents it: whole GiB
// as "4G", anything else in MiB ("3000M"). The daemon keeps the limit in
// bytes, in 64 bits, so 2⁴⁴ MiB (16 EiB) or more wraps around there.
func FormatMemLimit(mib uint64) string {
	if mib >= 1024 && mib%1024 == 0 {
		return fmt.Sprintf("%dG", mib/1024)
	}
	return fmt.Sprintf("%dM", mib)
}

// ParseMemLimit reads a limit as nvidia-cuda-mps-control's
// set_default_device_pinned_mem_limit does (driver 580.159.04), into bytes.
// It never fails, as the daemon never refuses a value:
//
//   - the number is read as C's strtoull reads it in base 10: an optional
//     sign, then the longest run of decimal digits, anything after it ignored
//     ("4.5G" is 4, "1e3G" is 1, "0x10" is 0, no digits is 0); past 2⁶⁴-1 it
//     is 2⁶⁴-1, and a minus sign negates it modulo 2⁶⁴;
//   - the character right after the digits picks the unit: G or g is GiB,
//     anything else MiB (4096, 4096M, 4096K, 4096T, 4096B and "4096 G" are
//     all 4096 MiB);
//   - the bytes wrap around modulo 2⁶⁴ (17179869184G is 0);
//   - 0 is no limit to the getter, which then prints nothing.
func ParseMemLimit(s string) uint64 {
	i, neg := 0, false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var n uint64
	overflow := false
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			overflow = true
		}
		n = n*10 + d
	}
	switch {
	case overflow:
		n = math.MaxUint64
	case neg:
		n = -n
	}
	if i < len(s) && (s[i] == 'G' || s[i] == 'g') {
		return n << 30
	}
	return n << 20
}

// DisplayMemLimit is how get_default_device_pinned_mem_limit prints a limit
// of b bytes, a whole number of MiB as ParseMemLimit returns (without the
// newline): rounded down to whole GiB from 1 GiB on
// ("4G"; 3000M reads back as "2G", though the server enforces 3000 MiB: its
// server.log says 0xbb800000 bytes), else in MiB ("512M"), and "" for 0, no
// limit. So a reply can only confirm limits in whole GiB.
func DisplayMemLimit(b uint64) string {
	switch {
	case b == 0:
		return ""
	case b >= 1<<30:
		return fmt.Sprintf("%dG", b>>30)
	}
	return fmt.Sprintf("%dM", b>>20)
}
