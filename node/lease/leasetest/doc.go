// Package leasetest sets up, for tests of the lease store's users, what
// the reclaim looks at: a lease's owner that has ended, and runc's state
// of a container it has.
package leasetest
