// Package scrape reads a Prometheus /metrics endpoint the way Prometheus
// does (the text format, parsed by prometheus/common's parser), for tests
// that check what gpumux's agents export.
package scrape
