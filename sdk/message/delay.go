package message

import (
	"errors"
	"fmt"
	"strconv"
)

// Reserved header names of delayed and scheduled messages
// (docs/protocol.md, "Delayed messages"). A message that carries one is
// held by the broker in its timer and appended to its partition when due.
const (
	// HeaderDeliverAt is the delivery time: decimal Unix milliseconds.
	HeaderDeliverAt = "metaq-deliver-at"
	// HeaderDelay is a delay in decimal milliseconds from the time the
	// broker accepts the message (for a transaction's message: from its
	// commit).
	HeaderDelay = "metaq-delay"
)

// ErrBadDelay means a delivery header is not a decimal integer, a delay
// is negative, or both headers are given.
var ErrBadDelay = errors.New("message: bad delivery time")

// Delivery is what a message's delivery headers ask: an absolute time
// (At, Unix ms) or a delay (Delay, ms) from acceptance.
type Delivery struct {
	At    int64
	Delay int64
	IsAt  bool
}

// Due returns the delivery time in Unix ms for a message accepted at now.
func (d Delivery) Due(now int64) int64 {
	if d.IsAt {
		return d.At
	}
	return now + d.Delay
}

// HeaderCancel, on a put of an empty message to a delayed message's topic
// and partition, cancels it: the value is its msgId in decimal.
const HeaderCancel = "metaq-cancel"

// Delayed reports whether m asks for a delivery time (DeliverAt or Delay).
func (m *Message) Delayed() bool { return !m.DeliverAt.IsZero() || m.Delay > 0 }

// delayHeaders is the number of headers DeliverAt or Delay add (0 or 1).
func (m *Message) delayHeaders() int {
	if m.Delayed() {
		return 1
	}
	return 0
}

// delayHeader returns the header DeliverAt or Delay is sent as.
func (m *Message) delayHeader() (key string, value []byte) {
	if !m.DeliverAt.IsZero() {
		return HeaderDeliverAt, strconv.AppendInt(nil, m.DeliverAt.UnixMilli(), 10)
	}
	return HeaderDelay, strconv.AppendInt(nil, m.Delay.Milliseconds(), 10)
}

// checkDelay refuses DeliverAt and Delay together, and a delivery header
// among Headers as well as the fields.
func (m *Message) checkDelay() error {
	if !m.DeliverAt.IsZero() && m.Delay != 0 {
		return fmt.Errorf("%w: DeliverAt and Delay both set", ErrBadDelay)
	}
	if m.Delay < 0 {
		return fmt.Errorf("%w: negative Delay %v", ErrBadDelay, m.Delay)
	}
	if m.Delayed() {
		for _, h := range m.Headers {
			if h.Key == HeaderDeliverAt || h.Key == HeaderDelay {
				return fmt.Errorf("%w: header %s given with DeliverAt or Delay", ErrBadDelay, h.Key)
			}
		}
	}
	return nil
}

// TimerHeaders reads a put body's delivery and cancel headers in one walk
// of its properties block: the broker's put path. ok is false when it has
// none of metaq-deliver-at, metaq-delay and metaq-cancel; cancel is the
// msgId of a metaq-cancel (then d is zero). Two of them, or one repeated,
// or a value that is not decimal, is ErrBadDelay.
func TimerHeaders(flag int32, data []byte) (d Delivery, cancel int64, ok bool, err error) {
	if flag&FlagHasProperties == 0 {
		return d, 0, false, nil
	}
	_, _, props, _, err := splitData(flag, data, false)
	if err != nil || len(props) < 2 || props[1]&propHeaders == 0 {
		return d, 0, false, err
	}
	var at, delay, cn []byte
	n := 0
	err = WalkProperties(props, &PropsVisitor{Header: func(k, v []byte, null bool) {
		if len(k) < 6 || string(k[:6]) != "metaq-" {
			return
		}
		switch string(k) {
		case HeaderDeliverAt:
			at, n = v, n+1
		case HeaderDelay:
			delay, n = v, n+1
		case HeaderCancel:
			cn, n = v, n+1
		}
	}})
	switch {
	case err != nil || n == 0:
		return d, 0, false, err
	case n > 1:
		return d, 0, true, fmt.Errorf("%w: more than one of %s, %s and %s, or one repeated",
			ErrBadDelay, HeaderDeliverAt, HeaderDelay, HeaderCancel)
	case at != nil:
		ms, perr := strconv.ParseInt(string(at), 10, 64)
		if perr != nil {
			return d, 0, true, fmt.Errorf("%w: %s %q is not decimal Unix milliseconds", ErrBadDelay, HeaderDeliverAt, at)
		}
		return Delivery{At: ms, IsAt: true}, 0, true, nil
	case delay != nil:
		ms, perr := strconv.ParseInt(string(delay), 10, 64)
		if perr != nil || ms < 0 {
			return d, 0, true, fmt.Errorf("%w: %s %q is not a non-negative decimal of milliseconds", ErrBadDelay, HeaderDelay, delay)
		}
		return Delivery{Delay: ms}, 0, true, nil
	default:
		id, perr := strconv.ParseInt(string(cn), 10, 64)
		if perr != nil || id == 0 {
			return d, 0, true, fmt.Errorf("%w: %s %q is not a decimal msgId", ErrBadDelay, HeaderCancel, cn)
		}
		return d, id, true, nil
	}
}
