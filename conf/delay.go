package conf

import "strconv"

// Delayed messages (docs/delayed.md).
const (
	// DefaultMaxDelay is max_delay's default: 40 days, in ms.
	DefaultMaxDelay = 40 * 24 * 3600 * 1000
	maxMaxDelay     = 365 * 24 * 3600 * 1000
	// DefaultTimerPartitions is timer_partitions' default.
	DefaultTimerPartitions = 4
	maxTimerPartitions     = 64
	// TimerTopic is the internal topic whose partitions are the timer
	// logs: the delayed messages accepted and not yet due, their
	// cancellations and the delivered marks.
	TimerTopic = "__metaq_timer"
)

func (k *checker) delay(c *Config) {
	k.intRange("max_delay", c.MaxDelay, 1000, maxMaxDelay)
	k.intRange("timer_partitions", int64(c.TimerPartitions), 1, maxTimerPartitions)
	for i := range c.Topics {
		if c.Topics[i].Name == TimerTopic {
			k.add("topic", "%s is the broker's internal timer topic; it cannot be configured", TimerTopic)
		}
	}
}

// TimerTopicConfig is the internal timer topic's settings: timer_partitions
// partitions in data_dir, group commit (every accepted delayed message is
// durable before its put is answered), retained for 2 × max_delay (the
// broker's retention of it also keeps every segment from the first one
// holding a message not delivered yet: core/timer's Keeper).
func (c *Config) TimerTopicConfig() TopicConfig {
	tc := c.resolve(&Topic{Name: TimerTopic})
	tc.NumPartitions = c.TimerPartitions
	tc.UnflushThreshold = 0
	tc.UnflushInterval = 0
	tc.AcceptSubscribe = true // offsets only: core/broker refuses gets of it
	tc.AcceptPublish = false  // the broker appends; clients do not
	tc.Filters = nil
	hours := (2*c.MaxDelay + 3600_000 - 1) / 3600_000
	tc.DeletePolicy = "delete," + strconv.FormatInt(hours, 10) + "h"
	tc.RetainFor, _ = ParseDeletePolicy(tc.DeletePolicy)
	return tc
}
