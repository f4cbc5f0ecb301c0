// Package version is gpumux's version and the commit it was built from,
// the same in every binary.
//
// `make build` and `make dist` stamp both with the linker
// (-X github.com/gpumux/gpumux/internal/version.version=… and …commit=…,
// from `git describe` and `git rev-parse`). A binary built without them
// (`go build`, `go install`) takes the module version Go recorded when it
// is a release, else the release in the file VERSION with "-dev", and the
// commit from the VCS settings Go recorded.
package version
