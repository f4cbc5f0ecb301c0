// Package ctest builds the C interposer (remote/interposer, installed as
// libcuda.so.1 in containers) and its C test programs
// (remote/interposer/tests) and runs them against gpumux-remoted's server
// (package remote/server) on the CPU fake backend (remote/fakecuda), over a
// unix socket and TCP loopback. The tests need a C compiler (cc, or $CC)
// and make; without them they fail, they do not skip. GM_CTEST_CC picks
// the compiler for the C code alone.
package ctest

// The NOT_SUPPORTED stubs of the entry points the interposer does not
// forward.
//go:generate go run ../internal/gencalls -spec ../proto/calls.def -unsupported ../interposer/unsupported.list -stubs ../interposer/zz_unsupported.c

// The NOT_SUPPORTED stubs of the NVML functions gpumux's NVML library for
// remote shares does not answer.
//go:generate go run ../internal/gennvml -symbols ../../timeslice/limiter/libnvidia-ml-580.159.04.symbols -answered ../nvml/answered.list -out ../nvml/zz_unsupported.c
