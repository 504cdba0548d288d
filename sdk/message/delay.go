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

// DeliveryOf returns the delivery a put body (flag and data) asks for; ok
// is false when it carries neither header. It assumes the body was
// checked (SplitDataProducer on the put path); a malformed header value
// is ErrBadDelay.
func DeliveryOf(flag int32, data []byte) (d Delivery, ok bool, err error) {
	if flag&FlagHasProperties == 0 {
		return d, false, nil
	}
	_, _, props, _, err := splitData(flag, data, false)
	if err != nil || len(props) < 2 || props[1]&propHeaders == 0 {
		return d, false, err
	}
	var at, delay []byte
	var nAt, nDelay int
	err = WalkProperties(props, &PropsVisitor{Header: func(k, v []byte, null bool) {
		switch string(k) {
		case HeaderDeliverAt:
			at, nAt = v, nAt+1
		case HeaderDelay:
			delay, nDelay = v, nDelay+1
		}
	}})
	if err != nil || nAt+nDelay == 0 {
		return d, false, err
	}
	if nAt+nDelay > 1 {
		return d, true, fmt.Errorf("%w: %s and %s given together or repeated", ErrBadDelay, HeaderDeliverAt, HeaderDelay)
	}
	if nAt == 1 {
		n, err := strconv.ParseInt(string(at), 10, 64)
		if err != nil {
			return d, true, fmt.Errorf("%w: %s %q is not decimal Unix milliseconds", ErrBadDelay, HeaderDeliverAt, at)
		}
		return Delivery{At: n, IsAt: true}, true, nil
	}
	n, err := strconv.ParseInt(string(delay), 10, 64)
	if err != nil || n < 0 {
		return d, true, fmt.Errorf("%w: %s %q is not a non-negative decimal of milliseconds", ErrBadDelay, HeaderDelay, delay)
	}
	return Delivery{Delay: n}, true, nil
}

// HeaderCancel, on a put of an empty message to a delayed message's topic
// and partition, cancels it: the value is its msgId in decimal.
const HeaderCancel = "metaq-cancel"

// CancelOf returns the msgId a put's metaq-cancel header names; ok is
// false without one.
func CancelOf(flag int32, data []byte) (id int64, ok bool, err error) {
	if flag&FlagHasProperties == 0 {
		return 0, false, nil
	}
	_, _, props, _, err := splitData(flag, data, false)
	if err != nil || len(props) < 2 || props[1]&propHeaders == 0 {
		return 0, false, err
	}
	var v []byte
	err = WalkProperties(props, &PropsVisitor{Header: func(k, val []byte, null bool) {
		if string(k) == HeaderCancel {
			v, ok = val, true
		}
	}})
	if err != nil || !ok {
		return 0, false, err
	}
	id, perr := strconv.ParseInt(string(v), 10, 64)
	if perr != nil {
		return 0, true, fmt.Errorf("%w: %s %q is not a decimal msgId", ErrBadDelay, HeaderCancel, v)
	}
	return id, true, nil
}

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
