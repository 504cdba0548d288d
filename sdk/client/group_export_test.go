package client

import "github.com/metaq-go/metaq/sdk/balance"

// SetOwnHook sets the test hook told when a group member starts (true) and
// has fully stopped (false) fetching a partition.
func SetOwnHook(c *Consumer, f func(p int32, owned bool)) { c.onOwn = f }

// SetClusterOwnHook is SetOwnHook for a ClusterConsumer; set it before
// Consume.
func SetClusterOwnHook(c *ClusterConsumer, f func(p balance.Partition, owned bool)) { c.onOwn = f }
