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
// the records into a pending buffer and returns. One writer goroutine per
// log takes everything pending, writes it with one write() and makes it
// durable with one fdatasync (at most 4 MiB per write), then raises the
// readable mark and calls every covered Waiter. While it syncs, new
// appends from all producers accumulate and share the next fsync. An
// acknowledgement (AppendDone with a nil error) therefore means the
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
// but a power loss can lose up to N messages or UnflushInterval of
// acknowledged data. As in MetaQ, consumers see only flushed data: the
// readable high-water mark (MaxOffset) is the end of the last fsync, and
// Read of a written but unflushed offset returns ErrNoData until the next
// flush.
//
// Failure. A failed write or fsync (EIO, ENOSPC, ...) fails the appends it
// covers with that error and puts the log into a failed state: every later
// Append returns an error wrapping ErrFailed, and no fsync is retried,
// because after a failed fsync the kernel may have dropped the dirty pages
// and a retry could report success for data that is gone (fsyncgate). Data
// already readable stays readable. Reopening the log runs recovery, which
// decides from the file what survived.
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
// the end, or a checksum mismatch. The cut (and the recovered tail, which
// may hold unflushed writes of a crashed process) is fsynced, together
// with the directory, before Open returns, and what was cut is logged.
// Start-up time therefore depends on the segment size, not on the amount
// of data. The count of records in the sealed segments is computed by a
// background goroutine after Open returns (MessageCountComplete).
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
