package client

// SetOwnHook sets the test hook told when a group member starts (true) and
// has fully stopped (false) fetching a partition.
func SetOwnHook(c *Consumer, f func(p int32, owned bool)) { c.onOwn = f }
