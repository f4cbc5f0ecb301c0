// Package version is gpumux's version, the same in every binary.
package version

// Version is gpumux's version.
const Version = "0.1.0"
