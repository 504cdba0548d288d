package filters

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	filterpb "github.com/metaq-go/metaq/filters/proto"
	"github.com/metaq-go/metaq/plugins"
)

// grpcClient is the host side of one plugin process: a Filter whose calls
// go over gRPC. It never panics; a gone process yields plugins.ErrUnavailable.
type grpcClient struct {
	client filterpb.FilterServiceClient
	// done is closed (by go-plugin) when the plugin process has exited.
	done context.Context
	// packed is set once the process said (in an InitResponse) that it
	// reads packed batches.
	packed atomic.Bool
	// ch is the batch channel to the process (channel.go).
	ch *channel
	// anyProps is set once an instance asked for properties (InitResponse
	// NeedProperties); props holds those instances (instance -> true). A
	// process none of whose instances asks costs one atomic load per call.
	anyProps atomic.Bool
	props    sync.Map
}

// wantsProps reports whether the instance asked for properties.
func (c *grpcClient) wantsProps(instance string) bool {
	if !c.anyProps.Load() {
		return false
	}
	_, ok := c.props.Load(instance)
	return ok
}

func newGRPCClient(done context.Context, client filterpb.FilterServiceClient) *grpcClient {
	c := &grpcClient{client: client, done: done}
	c.ch = newChannel(c)
	if done != nil {
		context.AfterFunc(done, c.ch.shutdown)
	}
	return c
}

var _ Filter = (*grpcClient)(nil)

func (c *grpcClient) Init(ctx context.Context, req *InitRequest) (*InitResponse, error) {
	if c.gone() {
		return nil, plugins.ErrUnavailable
	}
	resp, err := c.client.Init(ctx, &filterpb.InitRequest{
		Instance: req.Instance, Topic: req.Topic, Group: req.Group, Config: req.Config,
	})
	if err != nil {
		return nil, c.fromStatus(ctx, err)
	}
	if resp.GetNeedProperties() {
		c.props.Store(req.Instance, true)
		c.anyProps.Store(true)
	} else if c.anyProps.Load() {
		c.props.Delete(req.Instance)
	}
	if resp.GetPacked() {
		c.packed.Store(true)
		c.ch.open() // have the batch channel ready for the first Accept
	}
	return &InitResponse{NeedBodies: resp.GetNeedBodies(), NeedProperties: resp.GetNeedProperties()}, nil
}

func (c *grpcClient) Accept(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	if c.gone() {
		return nil, plugins.ErrUnavailable
	}
	if m := c.channelFor(req); m != nil {
		dl, _ := ctx.Deadline()
		return m.start(ctx, dl, c, req, false)(false)
	}
	if c.packed.Load() {
		return c.acceptPacked(ctx, req)
	}
	n := len(req.Records)
	in := &filterpb.AcceptRequest{
		Instance: req.Instance, Topic: req.Topic, Group: req.Group, Partition: req.Partition,
		Offsets: make([]int64, n), MsgIds: make([]int64, n), Flags: make([]int32, n),
		Attributes: make([]string, n), HasAttribute: make([]bool, n), Sizes: make([]int64, n),
	}
	bodies := false
	for i := range req.Records {
		if req.Records[i].Body != nil {
			bodies = true
			break
		}
	}
	if bodies {
		in.Bodies = make([][]byte, n)
	}
	for i := range req.Records {
		r := &req.Records[i]
		in.Offsets[i], in.MsgIds[i], in.Flags[i] = r.Offset, r.MsgID, r.Flag
		in.Attributes[i], in.HasAttribute[i], in.Sizes[i] = r.Attribute, r.HasAttribute, int64(r.Size)
		if bodies {
			in.Bodies[i] = r.Body
			if in.Bodies[i] == nil {
				in.Bodies[i] = []byte{}
			}
		}
	}
	if c.wantsProps(req.Instance) {
		var err error
		if in.Properties, err = propsColumn(req.Records); err != nil {
			return nil, fmt.Errorf("filters: properties: %w", err)
		}
	}
	resp, err := c.client.Accept(ctx, in)
	if err != nil {
		return nil, c.fromStatus(ctx, err)
	}
	if len(resp.GetKeep()) != n {
		return nil, fmt.Errorf("%w: %d for %d records", ErrBadResponse, len(resp.GetKeep()), n)
	}
	return &AcceptResponse{Keep: resp.Keep}, nil
}

// startAccept sends an Accept call due by deadline over the batch channel
// (with hold, it only queues it until flush) and returns the function that
// waits for its reply; without a channel it makes the call.
func (c *grpcClient) startAccept(ctx context.Context, deadline time.Time, req *AcceptRequest, hold bool) acceptFunc {
	if m := c.channelFor(req); m != nil {
		return m.start(ctx, deadline, c, req, hold)
	}
	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()
	return acceptDone(c.Accept(ctx, req))
}

// channelFor returns the batch channel's connection for req, or nil (the
// call goes over gRPC): the plugin has no channel (yet), or the batch is too
// large for one frame.
func (c *grpcClient) channelFor(req *AcceptRequest) *muxConn {
	if !c.packed.Load() || c.gone() {
		return nil
	}
	m := c.ch.get()
	if m != nil && packedSize(req.Records, c.wantsProps(req.Instance)) > chanMaxFrame-1<<20 {
		return nil
	}
	return m
}

// withDeadline is context.WithDeadline, for a deadline that may be zero
// (none).
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// flush writes the calls queued by startAccept with hold.
func (c *grpcClient) flush() {
	if m := c.ch.cur.Load(); m != nil {
		m.w.flush()
	}
}

// packBufs recycles the buffers of packed batches: gRPC has encoded the
// request by the time the call returns.
var packBufs = sync.Pool{New: func() any { return new([]byte) }}

// acceptPacked sends the batch as one packed byte string and reads the
// verdicts from a bitmap.
func (c *grpcClient) acceptPacked(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	bp := packBufs.Get().(*[]byte)
	buf := appendPacked((*bp)[:0], req.Records, c.wantsProps(req.Instance))
	resp, err := c.client.Accept(ctx, &filterpb.AcceptRequest{
		Instance: req.Instance, Topic: req.Topic, Group: req.Group, Partition: req.Partition, Packed: buf,
	})
	if cap(buf) <= maxPooledBuf {
		*bp = buf[:0]
		packBufs.Put(bp)
	}
	if err != nil {
		return nil, c.fromStatus(ctx, err)
	}
	keep, err := decodeBitmap(resp.GetKeepBits(), len(req.Records))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return &AcceptResponse{Keep: keep}, nil
}

// maxPooledBuf is the largest batch buffer kept for reuse, in bytes.
const maxPooledBuf = 1 << 20

// Close is a no-op: the supervisor owns the process.
func (c *grpcClient) Close() error { return nil }

func (c *grpcClient) gone() bool { return c.done != nil && c.done.Err() != nil }

// fromStatus maps a gRPC error back to the kind's sentinels (statusCodes),
// ErrPlugin for a code none has. A transport failure (the process died or
// is dying) is plugins.ErrUnavailable.
func (c *grpcClient) fromStatus(ctx context.Context, err error) error {
	if c.gone() {
		return fmt.Errorf("%w: %v", plugins.ErrUnavailable, err)
	}
	st, sentinel := statusCodes.FromStatus(err)
	if st == nil {
		return fmt.Errorf("%w: %v", plugins.ErrUnavailable, err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", plugins.ErrUnavailable, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("filter plugin: %w", context.DeadlineExceeded)
	case codes.Canceled:
		if ctx.Err() != nil {
			return fmt.Errorf("filter plugin: %w", ctx.Err())
		}
		return fmt.Errorf("%w: %s", plugins.ErrUnavailable, msg)
	}
	if sentinel == nil {
		sentinel = ErrPlugin
	}
	return wrapMsg(sentinel, msg)
}

// wrapMsg wraps sentinel with the plugin's message, without repeating the
// sentinel's own text when the plugin already included it.
func wrapMsg(sentinel error, msg string) error {
	msg = strings.TrimPrefix(msg, sentinel.Error())
	msg = strings.TrimPrefix(msg, ": ")
	if msg == "" {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}
