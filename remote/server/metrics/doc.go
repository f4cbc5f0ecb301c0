// Package metrics serves a remote GPU server's statistics (server.Stats)
// as Prometheus metrics, and its health for checks: gpumux-remoted's
// --metrics-addr. docs/remote.md ("Metrics", "Health check") lists them.
package metrics
