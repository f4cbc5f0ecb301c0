# Sourced by the limiter's GPU scripts (runtime.sh, nomad.sh): what a
# workload on a limited replica printed, checked. Needs fail (prints its
# arguments and exits).

# check_held NAME WANT_MIB FILE: FILE (memory.py report, then fill) shows
# a replica of WANT_MIB: mem_get_info's total is exactly that, and the
# 1 GiB tensors stopped within it with PyTorch's out-of-memory error.
check_held() {
	local name=$1 want=$2 file=$3 got filled
	got=$(grep -o 'total=[0-9]*' "$file" | cut -d= -f2)
	[[ $got == $((want << 20)) ]] || fail "$name: mem_get_info total $got, want $((want << 20))"
	filled=$(awk '/^FILLED/ {print $2}' "$file")
	[[ $filled -le $((want / 1024)) ]] && grep -q '^OOM' "$file" || fail "$name: filled $filled GiB of $((want / 1024))"
	echo "$name: sees $got bytes, got $filled 1 GiB tensors, then out of memory"
}

# check_split BIG SMALL ALONE: the spin runs in BIG (a 50% replica) and
# SMALL (25%), busy at the same time, each got its part of what one
# process gets alone (ALONE, spin's GPU_FRAC) within ±5 points.
check_split() {
	local b s bp sp
	b=$(awk '/GPU_FRAC/ {print $6}' "$1") s=$(awk '/GPU_FRAC/ {print $6}' "$2")
	bp=$(python3 -c "print(f'{100*$b/$3:.1f}')") sp=$(python3 -c "print(f'{100*$s/$3:.1f}')")
	echo "GPU time while both are busy (of what one process gets alone, $3): 50% replica $bp, 25% replica $sp"
	python3 -c "import sys; sys.exit(not (abs($bp-50) <= 5 and abs($sp-25) <= 5))" || fail "outside ±5 points"
}
