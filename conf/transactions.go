package conf

// Defaults of the transaction keys (see Config.TxDefaultTimeout).
const (
	DefaultTxDefaultTimeout   = 60        // seconds
	DefaultTxMaxBytes         = 16 << 20  // bytes
	DefaultTxMaxBufferedBytes = 256 << 20 // bytes
)

// MaxTxTimeout is the cap, in seconds, on the timeout a BEGIN asks for
// (MetaQ's).
const MaxTxTimeout = 60

func (k *checker) transactions(c *Config) {
	if v := c.FlushTxLogAtCommit; v < 0 || v > 2 {
		k.add("flush_tx_log_at_commit", "must be 0 (fsync left to the OS), 1 (fsync at every prepare, commit and rollback) or 2 (fsync once a second), got %d", v)
	}
	k.intRange("tx_default_timeout", int64(c.TxDefaultTimeout), 1, 86400)
	if k.min("tx_max_bytes", c.TxMaxBytes, 1024) && c.TxMaxBufferedBytes < c.TxMaxBytes {
		k.add("tx_max_buffered_bytes", "must be >= tx_max_bytes (%d), got %d", c.TxMaxBytes, c.TxMaxBufferedBytes)
	}
}
