package client

import (
	"context"
	"strconv"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// CancelDelayed cancels the delayed message msgID, sent to partition
// partition of topic (its SendResult's ID and Partition), on the broker
// at addr (docs/delayed.md): a put of an empty message with the header
// metaq-cancel. The broker records the cancellation in its timer log; a
// message already delivered is not recalled, and a msgId the timer does
// not hold is recorded and ignored.
func (c *Client) CancelDelayed(ctx context.Context, addr, topic string, partition int32, msgID int64) error {
	m := &message.Message{Topic: topic, Headers: message.Headers{{Key: message.HeaderCancel,
		Value: strconv.AppendInt(nil, msgID, 10)}}}
	data := m.AppendData(nil)
	crc := message.Checksum(data)
	_, err := c.Request(ctx, addr, func(dst []byte, opaque int32) []byte {
		dst = protocol.AppendPutHeader(dst, topic, partition, len(data), m.Flag(), int64(crc), opaque)
		return append(dst, data...)
	})
	return err
}
