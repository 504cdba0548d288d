package broker

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The broker's side of the transactions (core/tx): the transaction
// commands decoded and answered, the connection as a tx.Peer, the broker
// as a tx.Host, and tx.Error's status lines.

func init() { registerErrors(txStatus) }

// txStatus maps a *tx.Error: a plain message or an XA error (500), or a
// malformed txsync (400).
func txStatus(err error) (int, string, bool) {
	var e *tx.Error
	if !errors.As(err, &e) {
		return 0, "", false
	}
	switch e.Kind {
	case tx.XA:
		return protocol.StatusInternalError, protocol.XAErrorBody(e.Code, e.Msg), true
	case tx.Malformed:
		return protocol.StatusBadRequest, e.Msg, true
	}
	return protocol.StatusInternalError, e.Msg, true
}

// txConfig is the transactions' configuration in cfg.
func (b *Broker) txConfig(cfg *conf.Config) tx.Config {
	c := tx.FromConf(cfg)
	c.FileSize = b.knobs.txFileSize
	return c
}

// handleTransaction decodes a transaction command for core/tx
// (Manager.Do), which answers it through TxDone.
func (c *conn) handleTransaction(r *protocol.Request) {
	if r.TxType == protocol.TxRecover {
		c.reply(protocol.StatusOK, strings.Join(c.b.txm.Recover(c.txs, r.TxQualifier), "\r\n"), r.Opaque)
		return
	}
	id, err := protocol.ParseTxKey(r.TxKey)
	if err != nil { // the decoder checked it; kept for safety
		c.reply(protocol.StatusBadRequest, err.Error(), r.Opaque)
		return
	}
	if r.TxType == protocol.TxEnd {
		return // MetaQ ignores END and sends no reply
	}
	c.b.txm.Do(c.txs, tx.Command{Type: r.TxType, Key: id.String(), XA: id.XA, Session: string(r.TxSession), Timeout: r.TxTimeout}, r.Opaque)
}

// txReply answers a transaction operation: body, or err's status line.
func (c *conn) txReply(opaque int32, body string, err error) {
	if err != nil {
		c.replyErr(err, opaque)
		return
	}
	c.reply(protocol.StatusOK, body, opaque)
}

// handleTxPut buffers a transactional put in its transaction.
func (c *conn) handleTxPut(r *protocol.Request) {
	id, err := protocol.ParseTxKey(r.TxKey)
	if err != nil {
		c.putFail(r.Opaque, err.Error())
		return
	}
	if r.Partition < 0 {
		c.putFail(r.Opaque, "a transactional put must name its partition (got "+strconv.Itoa(int(r.Partition))+")")
		return
	}
	t, l, p, crc, _, ok := c.checkPut(r) // a transaction is not deduplicated: its commit stores it once
	if !ok {
		return
	}
	if r.Flag&message.FlagHasProperties != 0 {
		// A delayed message: its delay starts at the commit (core/tx
		// delayed.go); max_delay and the size with its timer header are
		// checked now.
		d, cancel, ok, bad := c.delayOf(r)
		if bad {
			return
		}
		if ok || cancel != 0 {
			if err := timer.CheckInTx(t.Name(), len(r.Body), d, cancel, time.Now().UnixMilli(), timer.LimitsOf(c.b.config())); err != nil {
				c.putRefused(err, r.Opaque)
				return
			}
			c.b.txm.ReadyTimer(t.Name(), p) // core/tx delayed.go
		}
	}
	msgID, err := c.b.txm.Put(c.txs, id.String(), id.XA, t, l, p, store.Entry{Flag: r.Flag, CRC: crc, Data: r.Body})
	if err != nil {
		_, body := statusOf(err)
		c.putFail(r.Opaque, body)
		return
	}
	if t.Conf().Stat {
		n := int64(len(r.Body))
		t.RT.Put.Add(1)
		t.RT.Size.Add(n)
	}
	var body [64]byte
	c.replyBytes(protocol.StatusOK, protocol.AppendPutResultBody(body[:0], msgID, p, -1), r.Opaque)
}

// TxUser implements tx.Peer.
func (c *conn) TxUser() (string, bool) {
	if u := c.auth.User; u != nil {
		return u.Name, u.Admin
	}
	return "", false
}

// TxPending implements tx.Peer.
func (c *conn) TxPending(n int) { c.addPending(n) }

// TxDone implements tx.Peer.
func (c *conn) TxDone(opaque int32, body string, err error) { c.txReply(opaque, body, err) }

// TxHeuristic implements tx.Peer (audit.go).
func (c *conn) TxHeuristic(details ...any) { c.connAudit(security.AuditHeuristic, details...) }

// txHost is the broker as the transactions' tx.Host.
type txHost struct{ partSource }

var _ tx.Host = txHost{}

func (h txHost) OpenTopic(name string) (tx.Topic, error) {
	t, err := h.b.lookup([]byte(name), true)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (h txHost) NextID() int64 { return h.b.ids.Next(1) }

func (h txHost) ObserveID(id int64) { h.b.ids.Observe(id) }

var _ tx.Topic = (*partition.Topic)(nil)

func (h txHost) AppendFailed(err error) { h.b.disks.WakeOn(err) }

func (h txHost) Fence() error {
	if f := h.b.fo; f != nil && !f.MayAck() {
		return errors.New(f.Refusal().Error())
	}
	return nil
}

// Master is the sync master when this broker takes puts as one (not as a
// failover slave).
func (h txHost) Master() *repl.SyncMaster {
	if sm := h.b.sync; sm != nil && h.b.replRole() != repl.RoleSlave {
		return sm.SyncMaster
	}
	return nil
}

// TimerLog implements tx.Host: a committed delayed message goes to the
// timer partition of its target, as an accepted delayed put does
// (delay.go).
func (h txHost) TimerLog(topic string, p int32) (tx.Topic, *store.Log, int32, error) {
	tt, err := h.b.openTopic(conf.TimerTopic)
	if err != nil {
		return nil, nil, 0, err
	}
	tp := timer.PartitionOf(topic, p, len(tt.Parts))
	return tx.TimerTopic{Topic: tt, Timer: h.b.delay}, tt.Parts[tp], tp, nil
}

func (h txHost) Slave() tx.SlaveLogs {
	if h.b.slave != nil {
		return h.b.slave
	}
	return nil
}

// userName is the connection's authenticated user, "" with auth off.
func (c *conn) userName() string {
	name, _ := c.TxUser()
	return name
}
