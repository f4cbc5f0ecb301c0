// Package timeslice is the mechanism that splits a GPU into replicas
// scheduled by time: `replicas = N` in a gpu block offers N shares of the
// GPU, each advertising a fair part of its memory and compute. Nothing is
// enforced yet (memory_isolation = "none"): the limiter that will enforce a
// replica's memory and compute goes here, as this provider's container edits.
package timeslice
