package message

import (
	"errors"
	"testing"
	"time"
)

func TestTimerHeaders(t *testing.T) {
	for _, c := range []struct {
		m      Message
		d      Delivery
		cancel int64
		ok     bool
		bad    bool
	}{
		{m: Message{Body: []byte("x")}},
		{m: Message{Key: []byte("k")}},
		{m: Message{Headers: Headers{{Key: "metaq-other", Value: []byte("1")}}}},
		{m: Message{DeliverAt: time.UnixMilli(1234)}, d: Delivery{At: 1234, IsAt: true}, ok: true},
		{m: Message{Delay: 1500 * time.Millisecond}, d: Delivery{Delay: 1500}, ok: true},
		{m: Message{Headers: Headers{{Key: HeaderCancel, Value: []byte("77")}}}, cancel: 77, ok: true},
		{m: Message{Headers: Headers{{Key: HeaderDelay, Value: []byte("-1")}}}, ok: true, bad: true},
		{m: Message{Headers: Headers{{Key: HeaderDelay, Value: []byte("1s")}}}, ok: true, bad: true},
		{m: Message{Headers: Headers{{Key: HeaderCancel, Value: []byte("0")}}}, ok: true, bad: true},
		{m: Message{Headers: Headers{{Key: HeaderDelay, Value: []byte("1")}, {Key: HeaderDelay, Value: []byte("1")}}}, ok: true, bad: true},
		{m: Message{Delay: time.Second, Headers: Headers{{Key: HeaderCancel, Value: []byte("5")}}}, ok: true, bad: true},
	} {
		data := c.m.AppendData(nil)
		d, cancel, ok, err := TimerHeaders(c.m.Flag(), data)
		if ok != c.ok || d != c.d || cancel != c.cancel || (err != nil) != c.bad || (err != nil && !errors.Is(err, ErrBadDelay)) {
			t.Errorf("%+v: got %+v %d %v %v", c.m, d, cancel, ok, err)
		}
	}
	m := Message{Delay: time.Second, DeliverAt: time.Now()}
	if err := m.CheckProperties(); !errors.Is(err, ErrBadDelay) {
		t.Fatalf("DeliverAt and Delay: %v", err)
	}
	m = Message{Delay: time.Second, Headers: Headers{{Key: HeaderDeliverAt, Value: []byte("1")}}}
	if err := m.CheckProperties(); !errors.Is(err, ErrBadDelay) {
		t.Fatalf("Delay and a metaq-deliver-at header: %v", err)
	}
}

func FuzzTimerHeaders(f *testing.F) {
	for _, m := range []Message{{Delay: time.Second}, {DeliverAt: time.UnixMilli(5)},
		{Headers: Headers{{Key: HeaderCancel, Value: []byte("9")}}}, {Key: []byte("k")}} {
		f.Add(m.Flag(), m.AppendData(nil))
	}
	f.Fuzz(func(t *testing.T, flag int32, data []byte) {
		d, cancel, ok, err := TimerHeaders(flag, data)
		if err != nil && !ok && !errors.Is(err, ErrBadProperties) && !errors.Is(err, ErrBadAttribute) && !errors.Is(err, ErrPropertiesLimit) {
			t.Fatalf("error %v without ok", err)
		}
		if !ok && (d != (Delivery{}) || cancel != 0) {
			t.Fatalf("nothing asked, got %+v %d", d, cancel)
		}
	})
}
