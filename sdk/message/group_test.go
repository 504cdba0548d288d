package message

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateGroup(t *testing.T) {
	for _, ok := range []string{
		"g", "meta-example", "Group_1.v2", "a.b", "...", "日本語グループ", "emoji-😀",
		`back\slash`, "quote'and\"", "semi;colon", "percent%_", strings.Repeat("x", MaxGroupLength),
		strings.Repeat("é", MaxGroupLength/2), "\u00a0nbsp",
	} {
		require.NoError(t, ValidateGroup(ok), "%q", ok)
	}
	for _, tc := range []struct{ name, why string }{
		{"", "empty"},
		{strings.Repeat("x", MaxGroupLength+1), "longer than 255"},
		{strings.Repeat("é", MaxGroupLength/2+1), "longer than 255"}, // 256 bytes, 128 characters
		{".", "reserved"},
		{"..", "reserved"},
		{"a/b", `'/'`},
		{"/", `'/'`},
		{"a b", `' '`},
		{"g ", `' '`},
		{"g\x00", "U+0000"},
		{"g\n", "U+000A"},
		{"g\r", "U+000D"},
		{"g\t", "U+0009"},
		{"g\x7f", "U+007F"},
		{"g\u0085", "U+0085"},
		{"g\xff", "invalid UTF-8 at byte 1"},
		{"g\xfe", "invalid UTF-8 at byte 1"},
		{"g\xc3", "invalid UTF-8 at byte 1"},
		{"\xed\xa0\x80", "invalid UTF-8 at byte 0"}, // a surrogate
		{"g\ufffd", "U+FFFD"},
		{"g\uffff", "U+FFFF"},
		{"g\ue000", "U+E000"},
	} {
		err := ValidateGroup(tc.name)
		require.ErrorIs(t, err, ErrBadGroup, "%q", tc.name)
		require.Contains(t, err.Error(), tc.why, "%q", tc.name)
		for _, c := range []byte(err.Error()) {
			require.False(t, c < 0x20 || c == 0x7f, "error %q holds a control byte", err)
		}
	}
}
