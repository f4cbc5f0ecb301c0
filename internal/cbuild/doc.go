// Package cbuild builds the repository's C code for the Go tests that run
// it (remote/ctest for the interposer, timeslice/ctest for the limiter):
// it finds the module root, the C compiler ($GM_CTEST_CC, else $CC, else
// cc) and make, turns GM_CTEST_SANITIZE into AddressSanitizer and
// UndefinedBehaviorSanitizer flags, and runs make and the compiler with
// their output in the error. A missing compiler or make is an error, not
// a reason to skip: the C libraries are part of the build.
package cbuild
