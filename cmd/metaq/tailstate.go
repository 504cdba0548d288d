package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// tailStateVersion is the state file's format version.
const tailStateVersion = 1

// fpMax is how many bytes of a file's start its fingerprint covers.
const fpMax = 1024

// tailState is the state file of `metaq tail`: the shipped position of
// every file it follows, by identity (device and inode) and path.
type tailState struct {
	Version int             `json:"version"`
	Topic   string          `json:"topic"`
	Files   []tailFileState `json:"files"`
}

// tailFileState is one file's position: Offset is the end of the last
// record the broker acknowledged (or the spool took). FpLen and FpCRC are
// the CRC-32 of the file's first FpLen bytes, which tell a new file that
// reuses an inode, or a file truncated and rewritten while the shipper
// was stopped, from the one the offset belongs to.
type tailFileState struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
	FpLen  int64  `json:"fpLen"`
	FpCRC  uint32 `json:"fpCrc"`
}

// errStateCorrupt wraps every reason a state file cannot be used.
var errStateCorrupt = errors.New("corrupt")

// loadTailState reads the state file at path: a missing file is an empty
// state; one that does not parse, or whose entries make no sense, is an
// error wrapping errStateCorrupt.
func loadTailState(path string) (*tailState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &tailState{Version: tailStateVersion}, nil
	}
	if err != nil {
		return nil, err
	}
	return parseTailState(b)
}

// parseTailState decodes and checks a state file's bytes.
func parseTailState(b []byte) (*tailState, error) {
	var st tailState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%w: %v", errStateCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", errStateCorrupt)
	}
	if st.Version != tailStateVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errStateCorrupt, st.Version, tailStateVersion)
	}
	seen := map[[2]uint64]bool{}
	for i, f := range st.Files {
		switch {
		case f.Path == "" || !filepath.IsAbs(f.Path):
			return nil, fmt.Errorf("%w: file %d: path %q is not absolute", errStateCorrupt, i, f.Path)
		case f.Offset < 0:
			return nil, fmt.Errorf("%w: %s: negative offset %d", errStateCorrupt, f.Path, f.Offset)
		case f.FpLen < 0 || f.FpLen > fpMax:
			return nil, fmt.Errorf("%w: %s: fingerprint length %d out of range", errStateCorrupt, f.Path, f.FpLen)
		case seen[[2]uint64{f.Dev, f.Ino}] && (f.Dev != 0 || f.Ino != 0):
			return nil, fmt.Errorf("%w: %s: device %d inode %d listed twice", errStateCorrupt, f.Path, f.Dev, f.Ino)
		}
		seen[[2]uint64{f.Dev, f.Ino}] = true
	}
	return &st, nil
}

// saveTailState writes st to path durably: a temporary file in the same
// directory, fsynced, renamed over path, and the directory fsynced.
func saveTailState(path string, st *tailState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Dir(path), err)
	}
	return nil
}

// fingerprint returns the CRC-32 of f's first min(size, fpMax) bytes.
func fingerprint(f *os.File, size int64) (int64, uint32, error) {
	n := min(size, fpMax)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return 0, 0, err
	}
	return n, crc32.ChecksumIEEE(buf), nil
}

// matchesFingerprint reports whether f still starts with the bytes fs's
// fingerprint covers.
func matchesFingerprint(f *os.File, fs tailFileState) bool {
	if fs.FpLen == 0 {
		return true
	}
	buf := make([]byte, fs.FpLen)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return false
	}
	return crc32.ChecksumIEEE(buf) == fs.FpCRC
}

func (f tailFileState) String() string {
	return f.Path + " (dev " + strconv.FormatUint(f.Dev, 10) + " inode " + strconv.FormatUint(f.Ino, 10) + ")"
}
