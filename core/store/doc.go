// Package store is the broker's on-disk message log: one Log per topic
// partition, in the directory <data>/<topic>-<partition>/, laid out as
// MetaQ lays it out.
//
// # Layout
//
// A log is a chain of segment files named by their start byte offset,
// zero-padded to 20 digits, with the suffix ".meta"
// (00000000000000000000.meta, ...). Other files in the directory are
// ignored. Each segment holds records back to back, in the format of
// package message:
//
//	[int32 BE len][int32 BE crc(data)][int64 BE msgId][int32 BE flag][data]
//
// Offsets are absolute byte offsets of the partition: a record's offset is
// its segment's start plus its position in the file. Segment i+1 starts
// exactly where segment i ends. Only the last segment is written; it rolls
// (a new file named old start + old size is created) before a write when
// it has reached Options.MaxSegmentSize, so a segment may overshoot by one
// write and a write never straddles two segments. The checksum covers only
// the data, as in MetaQ: a damaged id or flag is not detectable.
//
// # Flush modes, acknowledgement and visibility
//
// Group commit (UnflushThreshold <= 0, the shipped default). Append frames
// the records into a pending buffer and returns. With a Journal
// (Options.Journal, one per data directory, as the broker runs it), the
// journal's single committer goroutine runs rounds for every log of the
// directory: it takes everything pending in every log, adds each log's
// bytes to its active segment's in-memory tail (no write()), appends a
// journal record per log and chunk naming the partition, segment and
// offset, and does one fdatasync of the journal for all of them (on a
// syncer goroutine, while the committer stages the next round); then a
// completer goroutine raises each log's readable mark and calls the
// covered Waiters. Read serves a tail's bytes from memory (View.Mem). The
// journal's checkpoints write the tails to the segment files and fsync
// them; Close writes what is left; OpenJournal replays the journal into
// the segments after a crash (docs/storage.md, "Segment tails").
// Journal.AppendAtomic appends to several journaled logs of one journal in
// one round, behind a group record, so that a crash keeps all of the parts
// or none (docs/storage.md, "Atomic groups"). A journaled log has
// no goroutine of its own. Without a Journal, one writer goroutine per log takes everything
// pending, writes it with one write() and makes it durable with one
// fdatasync of the segment (at most 4 MiB per write), then raises the
// readable mark and calls every covered Waiter. Either way, while one
// fsync runs, new appends from all producers accumulate and share the next
// one. An acknowledgement (AppendDone with a nil error) therefore means the
// records are on stable storage: they survive a process crash and a power
// loss. Records become readable at the same moment, so a consumer never
// sees a record that could still vanish. Appenders block only when more
// than 64 MiB are pending.
//
// Threshold mode (UnflushThreshold = N > 0). Append writes under the
// append lock and fsyncs when more than N messages are unflushed, or when
// UnflushInterval has passed since the last flush; a ticker also flushes
// every UnflushInterval. AppendDone is called after the write (and after
// the fsync if this append triggered one), so an acknowledgement normally
// means only that the kernel has the bytes: they survive a process crash
// but a power loss can lose up to 2N messages (N unflushed when a
// flush's fsync starts, and up to N more acknowledged while it runs) or
// about UnflushInterval of acknowledged data. As in MetaQ, consumers see only flushed data: the
// readable high-water mark (MaxOffset) is the end of the last fsync, and
// Read of a written but unflushed offset returns ErrNoData until the next
// flush.
//
// Failure. A failed write() (ENOSPC, EIO, a short write) or a segment
// roll that cannot create its file (EMFILE, ENOSPC, ...) fails only the
// appends it covers, with an error naming the file, the offset and the
// errno, and the log carries on: the next append tries again, at the same
// offset. Whatever part of the failed write reached the file is cut off
// (ftruncate back to the last good end) before anything else is written,
// so no torn or failed record is ever read, fsynced or found by recovery,
// and offsets never skip; if the cut itself fails it is retried before the
// next write or roll, and appends fail until it succeeds. Records carry no
// offset, so in group-commit mode the writer decides offsets when it
// writes: appends queued behind a failed chunk simply take its place.
//
// A failed fsync (of a segment, or of the directory after creating one)
// is different (so is, for a journaled log, a failed journal write or
// fdatasync, or a failed checkpoint fsync: it fails the whole journal,
// and every later append of every log of it): it fails the appends it covers and puts the log into a
// failed state. Every later Append returns an error wrapping ErrFailed,
// and no fsync is retried, because after a failed fsync the kernel may
// have dropped the dirty pages and a retry could report success for data
// that is gone (fsyncgate). Data already readable stays readable.
// Reopening the log runs recovery, which decides from the file what
// survived.
//
// # Reads
//
// Read(offset, maxSize) returns a View of bytes [offset, offset+maxSize) of
// the single segment containing offset, clipped to the readable mark; it
// never spans segments and may end inside a record (the consumer stops at
// the last whole record). Alignment is not validated. Offsets below the
// first segment give an *OffsetOutOfRangeError carrying the minimum
// (errors.Is ErrBelowMin); offsets at or past MaxOffset give ErrNoData.
// A View holds a reference on the segment's shared read descriptor, so
// retention or Close cannot close it under a reader; Release it once.
//
// # Recovery
//
// Open checks that the segments chain (start + size = next start) and
// fails, naming both files, if two do not. Only the last segment is read:
// it is scanned from byte 0 and cut at the first record with an incomplete
// header, a length below 0 or above MaxMessageSize, a body running past
// the end, or a checksum mismatch (in RecoverQuarantine mode only when
// nothing valid follows: see Corruption). The cut (and the recovered tail, which
// may hold unflushed writes of a crashed process) is fsynced, together
// with the directory, before Open returns, and what was cut is logged.
// Start-up time therefore depends on the segment size, not on the amount
// of data. The count of records in the sealed segments is computed by a
// background goroutine after Open returns (MessageCountComplete).
//
// A journaled log (RecoverQuarantine) usually skips that scan: after
// OpenJournal's replay the journal vouches for each partition the last
// checkpoint names (every byte before the checkpoint's end was fsynced at
// it; what follows was just compared with the journal and fsynced), so
// Open verifies only the records from the checkpoint's end to the end of
// the last segment, takes the last id from them or from the checkpoint,
// and leaves the segment's earlier bytes to the background scrub, like a
// sealed segment (restart.go). Start-up time then depends on the
// checkpoint interval, not on how full the segment is; appends wait while
// the journal is two checkpoints past the last durable one, which bounds
// what a restart replays. Anything that does not match falls back to the
// scan.
//
// # Corruption
//
// Recovery verifies the last segment's records, and an all-zero header
// counts as invalid (zero fill). When the scan stops at an invalid record
// it searches forward for the next valid one (findNextRecord: the first
// position holding a record with data, in range, inside the file, whose
// crc matches; bounded by the file size and a checksum budget). A damaged
// range with nothing valid after it is a torn tail and is cut. In
// RecoverQuarantine mode (the default) damaged ranges with valid records
// after them are copied to <dir>/quarantine/<segment>.<offset>.bad,
// offered to Options.Repairer, rewritten in place if its copy verifies,
// and otherwise Open fails with a *CorruptError and changes nothing.
// RecoverTruncate cuts at the first invalid record, as before.
//
// Sealed segments found at Open (and the part of the last segment a
// journaled Open did not scan) are verified in the background (the
// count walk checks every crc); damaged ranges are quarantined, offered to
// the Repairer, and otherwise recorded, so that Read clips a view at a
// damaged range and refuses an offset inside one with a *CorruptError.
// Until its scrub is done, Read checks the records of the range it
// returns. docs/storage.md has the rule and the costs.
//
// The journal's records carry their own crc32c, position and epoch. When
// OpenJournal's scan meets an invalid record it searches the next
// jResyncWindow bytes for a valid one (findNextJRecord); if there is
// none, it is a torn tail and ends the journal, as before. Otherwise the
// stretch is damage: the valid records after it are replayed, and the
// partition ranges the stretch held (checkDamage) must be intact in their
// segments; if they are not, OpenJournal fails with a
// *JournalCorruptError and changes nothing (JournalOptions.Recovery
// RecoverTruncate cuts those partitions instead). A damaged last
// checkpoint falls back to the one before it; with none left, OpenJournal
// refuses. Damage before the replay start is harmless.
//
// # Retention
//
// DeleteOlderThan applies MetaQ's delete policy (parsed by conf.ParseDeletePolicy) to
// sealed segments by modification time, oldest first and only as a
// prefix, so the minimum offset rises and the log never has a hole. The
// active segment is never deleted.
//
// # Concurrency and lock order
//
// All methods are safe for concurrent use. A Log has three mutexes, always
// taken in this order:
//
//	flushMu (threshold-mode fsync) → mu (append lock) → segMu (segment list)
//
// segMu is a leaf: nothing is locked while holding it, and no I/O beyond
// fstat is done under it. Read, NearestOffset and retention take only
// segMu. Waiters are called with no lock held. The group-commit writer
// takes mu only to swap buffers and to publish failures and new segments.
// Segment reference counts are atomic and need no lock.
package store
