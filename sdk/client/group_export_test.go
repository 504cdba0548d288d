package client

import "github.com/metaq-go/metaq/sdk/message"

// SetOwnHook sets the test hook told when a group member starts (true) and
// has fully stopped (false) fetching a partition.
func SetOwnHook(c *brokerConsumer, f func(p int32, owned bool)) { c.onOwn = f }

// SetLostHook sets the test hook told when a group member learns that the
// broker dropped it.
func SetLostHook(c *brokerConsumer, f func()) { c.onLost = f }

// SetClusterOwnHook is SetOwnHook for a clusterConsumer; set it before
// Consume.
func SetClusterOwnHook(c *clusterConsumer, f func(p message.Partition, owned bool)) { c.onOwn = f }
