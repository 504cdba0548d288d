package conf

// Defaults of the group-commit journal's keys (see Config.JournalFileSize).
const (
	DefaultJournalFileSize           = 64 << 20 // bytes
	DefaultJournalCheckpointBytes    = 64 << 20 // bytes
	DefaultJournalCheckpointInterval = 1000     // ms
)
