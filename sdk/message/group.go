package message

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxGroupLength is the longest consumer group name, in bytes.
const MaxGroupLength = 255

// ErrBadGroup is wrapped by ValidateGroup's errors.
var ErrBadGroup = errors.New("message: bad group name")

// ValidateGroup reports whether name can be a consumer group name: the
// broker, the offset stores and the cluster registry use it as a map and
// JSON key, a SQL value and a ZooKeeper node name, so one rule decides it
// everywhere. A group name is 1 to MaxGroupLength bytes of valid UTF-8,
// is neither "." nor "..", and holds none of:
//
//   - '/' (a ZooKeeper path separator) or ' ' (the text protocol's token
//     separator; MySQL's PAD SPACE comparison also ignores trailing spaces);
//   - control characters: U+0000..U+001F, U+007F..U+009F;
//   - the characters ZooKeeper refuses in node names: U+E000..U+F8FF
//     (private use) and U+FFF0..U+FFFF (specials, including U+FFFD, which
//     is also what invalid UTF-8 decodes to).
//
// Every other printable character is allowed, as MetaQ's groups are Java
// strings. The error (wrapping ErrBadGroup) says what is wrong without
// quoting the name, so a caller can add it with its own escaping.
func ValidateGroup(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadGroup)
	case len(name) > MaxGroupLength:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrBadGroup, len(name), MaxGroupLength)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is reserved", ErrBadGroup, name)
	}
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrBadGroup, i)
		case r == '/' || r == ' ':
			return fmt.Errorf("%w: %q at byte %d is not allowed", ErrBadGroup, r, i)
		case r <= 0x1f || (r >= 0x7f && r <= 0x9f):
			return fmt.Errorf("%w: control character %U at byte %d", ErrBadGroup, r, i)
		case (r >= 0xe000 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff):
			return fmt.Errorf("%w: %U at byte %d is not allowed in a ZooKeeper node name", ErrBadGroup, r, i)
		}
		i += n
	}
	return nil
}
