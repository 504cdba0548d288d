package filters

import (
	"fmt"
	"time"
	"unsafe"

	filterpb "github.com/metaq-go/metaq/filters/proto"
	"github.com/metaq-go/metaq/sdk/message"
)

// fillProps decodes each record's Properties into its Key, CreateTime, Tags
// and Headers (the plugin side, after a batch arrived), and clears those
// fields of a record without properties (recs may be reused). Tags and
// header keys alias the blocks (which the plugin side never reuses: they
// are copies, or the gRPC request's own bytes), and the batch's Tags and
// Headers share two backing arrays, so a batch costs a few allocations,
// not several per record. A malformed block is an error wrapping
// errPacked: the host checked it on put, so the batch is damaged.
func fillProps(recs []Record) error {
	d := propsDecoder{}
	d.v = message.PropsVisitor{
		Key:       func(k []byte) { d.r.Key = k },
		Timestamp: func(ms int64) { d.r.CreateTime = time.UnixMilli(ms) },
		Tag:       func(t []byte) { d.tags = append(d.tags, unsafe.String(unsafe.SliceData(t), len(t))) },
		Header: func(k, v []byte, null bool) {
			if null {
				v = nil
			} else if v == nil {
				v = []byte{}
			}
			d.hdrs = append(d.hdrs, message.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: v})
		},
	}
	for i := range recs {
		r := &recs[i]
		if r.Key != nil || r.Tags != nil || r.Headers != nil || !r.CreateTime.IsZero() {
			r.Key, r.Tags, r.Headers, r.CreateTime = nil, nil, nil, time.Time{}
		}
		if r.Properties == nil {
			continue
		}
		d.r = r
		t0, h0 := len(d.tags), len(d.hdrs)
		if err := message.WalkProperties(r.Properties, &d.v); err != nil {
			return fmt.Errorf("%w: record %d: %v", errPacked, i, err)
		}
		if len(d.tags) > t0 {
			r.Tags = d.tags[t0:len(d.tags):len(d.tags)]
		}
		if len(d.hdrs) > h0 {
			r.Headers = d.hdrs[h0:len(d.hdrs):len(d.hdrs)]
		}
	}
	return nil
}

// propsDecoder is fillProps' state: the record being decoded and the
// batch's tags and headers so far.
type propsDecoder struct {
	r    *Record
	v    message.PropsVisitor
	tags []string
	hdrs message.Headers
}

// propsColumn converts the records' properties blocks to the request's
// properties column (a request in columns, to a plugin that asked for
// properties and does not read packed batches).
func propsColumn(recs []Record) ([]*filterpb.RecordProperties, error) {
	out := make([]*filterpb.RecordProperties, len(recs))
	var m message.Message
	for i := range recs {
		p := &filterpb.RecordProperties{}
		out[i] = p
		if recs[i].Properties == nil {
			continue
		}
		if err := message.DecodeProperties(recs[i].Properties, &m); err != nil {
			return nil, fmt.Errorf("record at offset %d: %w", recs[i].Offset, err)
		}
		p.Key, p.HasKey = m.Key, m.Key != nil
		if !m.Timestamp.IsZero() {
			p.CreateTimeMs, p.HasCreateTime = m.Timestamp.UnixMilli(), true
		}
		p.Tags = m.Tags
		if len(m.Headers) > 0 {
			p.Headers = make([]*filterpb.Header, len(m.Headers))
			for j, h := range m.Headers {
				p.Headers[j] = &filterpb.Header{Key: h.Key, Value: h.Value, Null: h.Value == nil}
			}
		}
	}
	return out, nil
}

// propsFromColumn sets the records' Key, CreateTime, Tags and Headers from
// a request's properties column (the plugin side of propsColumn).
func propsFromColumn(recs []Record, col []*filterpb.RecordProperties) {
	for i, p := range col {
		r := &recs[i]
		if p.GetHasKey() {
			r.Key = p.GetKey()
			if r.Key == nil {
				r.Key = []byte{}
			}
		}
		if p.GetHasCreateTime() {
			r.CreateTime = time.UnixMilli(p.GetCreateTimeMs())
		}
		r.Tags = p.GetTags()
		if hs := p.GetHeaders(); len(hs) > 0 {
			r.Headers = make(message.Headers, len(hs))
			for j, h := range hs {
				v := h.GetValue()
				if h.GetNull() {
					v = nil
				} else if v == nil {
					v = []byte{}
				}
				r.Headers[j] = message.Header{Key: h.GetKey(), Value: v}
			}
		}
	}
}
