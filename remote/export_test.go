package remote

// PoolConfig is poolConfig, for the tests of package remote_test.
var PoolConfig = poolConfig
