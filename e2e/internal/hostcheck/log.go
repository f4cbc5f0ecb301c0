package hostcheck

import (
	"os"
	"path/filepath"
	"strings"
)

// ReportLog prints, with logf (a test's Logf), the last max bytes of a
// daemon's log between marker lines naming it (what, e.g. "containerd", and
// its path), and copies the whole log to $GPUMUX_E2E_LOGDIR/<test>.<what>.log
// when that is set: what a harness does when its test failed.
func ReportLog(logf func(format string, args ...any), test, what, path string, log []byte, max int) {
	b := log
	if len(b) > max {
		logf("%s log is %d bytes; last %d bytes follow", what, len(b), max)
		b = b[len(b)-max:]
	}
	logf("----- %s log (%s) -----\n%s\n----- end of %s log -----", what, path, b, what)
	if dir := os.Getenv("GPUMUX_E2E_LOGDIR"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(test) + "." + what + ".log"
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, name), log, 0o644)
		}
	}
}
