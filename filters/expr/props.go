package expr

import (
	"bytes"
	"unsafe"

	"github.com/metaq-go/metaq/sdk/message"
)

// The properties block is read with sdk/message's walker, which checks it
// as it goes (bounds, limits, UTF-8): a block that does not decode reads as
// none, whatever the walker saw before the error. None of these allocate.

func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// propKey returns the key of block, and whether it has one.
func propKey(block []byte) (key []byte, ok bool) {
	if block == nil {
		return nil, false
	}
	v := message.PropsVisitor{Key: func(k []byte) { key, ok = k, true }}
	if message.WalkProperties(block, &v) != nil {
		return nil, false
	}
	return key, ok
}

// propHasTag reports whether block has the tag t.
func propHasTag(block, t []byte) bool {
	if block == nil {
		return false
	}
	found := false
	v := message.PropsVisitor{Tag: func(x []byte) { found = found || bytes.Equal(x, t) }}
	return message.WalkProperties(block, &v) == nil && found
}

// propAnyTag reports whether block has one of the tags vs.
func propAnyTag(block []byte, vs []value) bool {
	if block == nil {
		return false
	}
	found := false
	v := message.PropsVisitor{Tag: func(x []byte) {
		for i := range vs {
			if !found && bytes.Equal(x, vs[i].b) {
				found = true
			}
		}
	}}
	return message.WalkProperties(block, &v) == nil && found
}

// propHeader returns the value of the last header of block named name (a
// null value reads as empty), and whether there is one.
func propHeader(block []byte, name string) (val []byte, ok bool) {
	if block == nil {
		return nil, false
	}
	v := message.PropsVisitor{Header: func(k, x []byte, _ bool) {
		if string(k) == name {
			val, ok = x, true
		}
	}}
	if message.WalkProperties(block, &v) != nil {
		return nil, false
	}
	return val, ok
}
