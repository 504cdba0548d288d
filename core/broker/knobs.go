package broker

// knobs are the broker's test-only settings. They are not in Options, which
// holds only what a user sets: New leaves them zero, and the white-box tests
// set them through newBroker.
type knobs struct {
	// openHook, if set, is called with the topic's name while a topic's
	// partitions are being opened, with no broker lock held.
	openHook func(topic string)
	// txFileSize, if set, replaces the transaction journal's file size.
	txFileSize int64
	// replAddr, if set, maps the address of a replication peer (a slave's
	// master, a sync master's slave) to the one to dial, so that a fault
	// proxy can sit between them.
	replAddr func(addr string) string
	// noTimerMarks, if set, makes the timer loops write no delivered
	// marks: every round is as if a crash lost its mark.
	noTimerMarks bool
}
