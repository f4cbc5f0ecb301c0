package hostcheck

import "strings"

// FilterEnv returns env (KEY=VALUE entries) without the variables named in
// drop, for the processes a harness starts: a daemon under test (which then
// gets its marker, see Owner.Marker) or a build.
func FilterEnv(env []string, drop ...string) []string {
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
