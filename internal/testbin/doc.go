// Package testbin builds gpumux's commands that tests run as separate
// processes, once per test binary: the stand-in MPS control daemon; and
// writes a stand-in of runc's init (RuncInit).
//
//	func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }   // removes what was built
//	bin := testbin.FakeMPS(t)
package testbin
