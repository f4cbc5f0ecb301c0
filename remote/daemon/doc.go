// Package daemon is gpumux-remoted's command line: it parses and checks the
// flags (their names and meanings are a contract: docs/remote.md), opens
// the backend and runs the server (package remote/server) on the listeners
// they name, with its metrics and health check (package
// remote/server/metrics), until the context ends. cmd/gpumux-remoted only
// calls Run.
package daemon
