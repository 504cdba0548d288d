// Package zkpath is MetaQ's ZooKeeper znode schema, written once: the paths
// and node names the broker registry writes, the SDK, the CLI and the
// ZooKeeper offset store read (and, for consumer groups and offsets, write).
// R is the root (zk.zkRoot, default "/meta"), E ephemeral, P persistent:
//
//	R/brokers/ids/<id>                             P  the master node's data
//	R/brokers/ids/<id>/master                      E  meta://host:port (metaqs://host:tls_port if TLS-only)
//	R/brokers/ids/<id>/master_tls                  E  metaqs://host:tls_port, if both listeners are on
//	R/brokers/ids/<id>/master_config_checksum      E  CRC32 of the config file, decimal
//	R/brokers/ids/<id>/slave<N>                    E  a slave's URI
//	R/brokers/ids/<id>/epoch                       P  the failover fencing epoch, "<epoch> <holder> <insync>" (failover = true)
//	R/brokers/topics/<t>/<id>-m                    E  numPartitions (deprecated, still written)
//	R/brokers/topics-pub/<t>/<id>-m                E  {"numParts":N,"broker":"<id>-m"} if accept_publish
//	R/brokers/topics-sub/<t>/<id>-m                E  {"numParts":N,"broker":"<id>-m"} if accept_subscribe
//	R/consumers/<g>/ids/<g>_<id>                   E  the member's subscribed topics, comma-separated
//	R/consumers/<g>/owners/<t>/<brokerId>-<p>      E  the owning consumer id
//	R/consumers/<g>/offsets/<t>/<brokerId>-<p>     P  "<msgId>-<offset>"
//
// A slave registers its topics as <id>-s<N>. The builders take a root
// without a trailing slash (see [Root]); the parsers accept exactly what
// the builders write, so Parse(Build(x)) == x and Build(Parse(s)) == s.
package zkpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultRoot is MetaQ's default zk.zkRoot.
const DefaultRoot = "/meta"

// Node names under R/brokers/ids/<id>.
const (
	MasterNode         = "master"
	MasterTLSNode      = "master_tls"
	MasterChecksumNode = "master_config_checksum"
	SlavePrefix        = "slave"
	// EpochNode is reserved for the fencing epoch of automatic failover
	// (issue 11): a persistent child of ids/<id> that neither starts with
	// "master" nor with SlavePrefix, so that readers of the other nodes
	// (and MetaQ's) skip it.
	EpochNode = "epoch"
)

// Root returns root in the form the builders take: "" becomes
// [DefaultRoot] and a trailing slash is dropped, so "/" is "" (the
// ZooKeeper root itself) and the paths are "/brokers/...".
func Root(root string) string {
	if root == "" {
		root = DefaultRoot
	}
	return strings.TrimRight(root, "/")
}

// Brokers is R/brokers, the parent of every node a broker registers.
func Brokers(root string) string { return root + "/brokers" }

// BrokerIDs is R/brokers/ids, one child per registered broker id.
func BrokerIDs(root string) string { return root + "/brokers/ids" }

// Broker is R/brokers/ids/<id>.
func Broker(root string, id int) string { return BrokerIDs(root) + "/" + strconv.Itoa(id) }

// Master is R/brokers/ids/<id>/master, the master's URI.
func Master(root string, id int) string { return Broker(root, id) + "/" + MasterNode }

// MasterTLS is R/brokers/ids/<id>/master_tls, the master's metaqs:// URI
// when it listens in plain text too.
func MasterTLS(root string, id int) string { return Broker(root, id) + "/" + MasterTLSNode }

// MasterChecksum is R/brokers/ids/<id>/master_config_checksum.
func MasterChecksum(root string, id int) string { return Broker(root, id) + "/" + MasterChecksumNode }

// Slave is R/brokers/ids/<id>/slave<n>, slave n's URI.
func Slave(root string, id, n int) string {
	return Broker(root, id) + "/" + SlavePrefix + strconv.Itoa(n)
}

// Epoch is R/brokers/ids/<id>/epoch (reserved, see [EpochNode]).
func Epoch(root string, id int) string { return Broker(root, id) + "/" + EpochNode }

// ParseBrokerID parses a child of R/brokers/ids.
func ParseBrokerID(s string) (int, error) {
	if !canonical(s) {
		return 0, fmt.Errorf("broker id %q: want a non-negative decimal number", s)
	}
	id, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("broker id %q: %w", s, err)
	}
	return int(id), nil
}

// Kind is one of the three directories under R/brokers where brokers
// register their topics.
type Kind string

// The topic kinds.
const (
	// Topics is R/brokers/topics, data the partition count (deprecated,
	// still written for old clients).
	Topics Kind = "topics"
	// TopicsPub is R/brokers/topics-pub, what producers see.
	TopicsPub Kind = "topics-pub"
	// TopicsSub is R/brokers/topics-sub, what consumers balance.
	TopicsSub Kind = "topics-sub"
)

// Dir is R/brokers/<kind>, one child per topic.
func (k Kind) Dir(root string) string { return Brokers(root) + "/" + string(k) }

// Topic is R/brokers/<kind>/<topic>, one child per broker ([BrokerName]).
func (k Kind) Topic(root, topic string) string { return k.Dir(root) + "/" + topic }

// Node is R/brokers/<kind>/<topic>/<b>.
func (k Kind) Node(root, topic string, b BrokerName) string {
	return k.Topic(root, topic) + "/" + b.String()
}

// BrokerName is the name of a broker's node under a topic: "<id>-m" for a
// master, "<id>-s<N>" for slave N.
type BrokerName struct {
	ID int
	// Slave is the slave number, or -1 for the master.
	Slave int
}

// MasterName is broker id's master name, "<id>-m".
func MasterName(id int) BrokerName { return BrokerName{ID: id, Slave: -1} }

// IsMaster reports whether b names a master ("<id>-m").
func (b BrokerName) IsMaster() bool { return b.Slave < 0 }

// String returns "<id>-m" or "<id>-s<N>".
func (b BrokerName) String() string {
	if b.IsMaster() {
		return strconv.Itoa(b.ID) + "-m"
	}
	return strconv.Itoa(b.ID) + "-s" + strconv.Itoa(b.Slave)
}

// ParseBrokerName parses "<id>-m" or "<id>-s<N>", both numbers
// non-negative and canonical.
func ParseBrokerName(s string) (BrokerName, error) {
	idText, role, ok := strings.Cut(s, "-")
	if !ok {
		return BrokerName{}, fmt.Errorf("broker node %q: want <brokerId>-m or <brokerId>-s<N>", s)
	}
	id, err := ParseBrokerID(idText)
	if err != nil {
		return BrokerName{}, fmt.Errorf("broker node %q: %w", s, err)
	}
	if role == "m" {
		return MasterName(id), nil
	}
	n, ok := strings.CutPrefix(role, "s")
	if !ok || !canonical(n) {
		return BrokerName{}, fmt.Errorf("broker node %q: want <brokerId>-m or <brokerId>-s<N>", s)
	}
	slave, err := strconv.ParseInt(n, 10, 32)
	if err != nil {
		return BrokerName{}, fmt.Errorf("broker node %q: slave: %w", s, err)
	}
	return BrokerName{ID: id, Slave: int(slave)}, nil
}

// TopicData is the data of a topics-pub or topics-sub node.
type TopicData struct {
	NumParts int    `json:"numParts"`
	Broker   string `json:"broker"`
}

// Bytes encodes d as MetaQ writes it, {"numParts":N,"broker":"<id>-m"}.
func (d TopicData) Bytes() []byte {
	b, _ := json.Marshal(d) // cannot fail: an int and a string
	return b
}

// ParseTopicData decodes a topics-pub or topics-sub node's data. A
// negative partition count is an error; zero is returned as it is.
func ParseTopicData(b []byte) (TopicData, error) {
	var d TopicData
	if err := json.Unmarshal(b, &d); err != nil {
		return TopicData{}, fmt.Errorf("topic data %q: %w", b, err)
	}
	if d.NumParts < 0 {
		return TopicData{}, fmt.Errorf("topic data %q: negative numParts", b)
	}
	return d, nil
}

// Consumers is R/consumers, one child per group.
func Consumers(root string) string { return root + "/consumers" }

// Group is R/consumers/<g>.
func Group(root, group string) string { return Consumers(root) + "/" + group }

// Members is R/consumers/<g>/ids, one child per member ([ConsumerID]).
func Members(root, group string) string { return Group(root, group) + "/ids" }

// Member is R/consumers/<g>/ids/<consumerID>.
func Member(root, group, consumerID string) string { return Members(root, group) + "/" + consumerID }

// Owners is R/consumers/<g>/owners, one child per topic.
func Owners(root, group string) string { return Group(root, group) + "/owners" }

// OwnersTopic is R/consumers/<g>/owners/<t>, one child per claimed
// partition ([PartitionName]).
func OwnersTopic(root, group, topic string) string { return Owners(root, group) + "/" + topic }

// Owner is R/consumers/<g>/owners/<t>/<brokerId>-<p>.
func Owner(root, group, topic string, brokerID int, partition int32) string {
	return OwnersTopic(root, group, topic) + "/" + PartitionName(brokerID, partition)
}

// Offsets is R/consumers/<g>/offsets, one child per topic.
func Offsets(root, group string) string { return Group(root, group) + "/offsets" }

// OffsetsTopic is R/consumers/<g>/offsets/<t>, one child per partition
// ([PartitionName]).
func OffsetsTopic(root, group, topic string) string { return Offsets(root, group) + "/" + topic }

// Offset is R/consumers/<g>/offsets/<t>/<brokerId>-<p>.
func Offset(root, group, topic string, brokerID int, partition int32) string {
	return OffsetsTopic(root, group, topic) + "/" + PartitionName(brokerID, partition)
}

// PartitionName is MetaQ's partition string "<brokerId>-<partition>", the
// name of owner and offset nodes.
func PartitionName(brokerID int, partition int32) string {
	return string(AppendPartitionName(nil, brokerID, partition))
}

// AppendPartitionName appends [PartitionName] to b.
func AppendPartitionName(b []byte, brokerID int, partition int32) []byte {
	b = strconv.AppendInt(b, int64(brokerID), 10)
	b = append(b, '-')
	return strconv.AppendInt(b, int64(partition), 10)
}

// ParsePartitionName parses a partition string as [PartitionName] writes
// it: two non-negative decimal numbers in canonical form (no sign, no
// leading zeros, no spaces) joined by "-".
func ParsePartitionName(s string) (brokerID int, partition int32, err error) {
	b, p, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("partition %q: want <brokerId>-<partition>", s)
	}
	if !canonical(b) || !canonical(p) {
		return 0, 0, fmt.Errorf("partition %q: want two non-negative decimal numbers", s)
	}
	id, err := strconv.ParseInt(b, 10, strconv.IntSize)
	if err != nil {
		return 0, 0, fmt.Errorf("partition %q: broker id: %w", s, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("partition %q: partition: %w", s, err)
	}
	return int(id), int32(n), nil
}

// ConsumerID is a group member's id as MetaQ registers it, "<group>_<id>".
func ConsumerID(group, id string) string { return group + "_" + id }

// errNotMember is ParseConsumerID's error for an id of another group.
var errNotMember = errors.New("not <group>_<id>")

// ParseConsumerID returns the id part of consumerID, a member of group
// named by [ConsumerID]. The group is needed: it may hold "_" itself.
func ParseConsumerID(group, consumerID string) (string, error) {
	id, ok := strings.CutPrefix(consumerID, group+"_")
	if !ok || id == "" {
		return "", fmt.Errorf("consumer id %q of group %q: %w", consumerID, group, errNotMember)
	}
	return id, nil
}

// MemberData is a member node's data: its subscribed topics, joined by ",".
func MemberData(topics []string) []byte { return []byte(strings.Join(topics, ",")) }

// ParseMemberData splits a member node's data into its topics, dropping
// spaces around them, empty ones and repeats, in the order written.
func ParseMemberData(b []byte) []string {
	var ts []string
	for t := range strings.SplitSeq(string(b), ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	return ts
}

// canonical reports whether s is a non-negative decimal number without
// sign or leading zeros.
func canonical(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// EpochData is the data of ids/<id>/epoch, the fencing epoch of automatic
// failover (docs/replication.md, Failover): "<epoch> <holder> <insync>",
// for example "3 s1 -". Holder is the member that holds the epoch (the
// only one that may acknowledge puts for the broker id): "m" for the
// broker started as master (slave_id -1), "s<N>" for slave N. InSync is
// the slave the holder declared in sync (it has every message the holder
// acknowledged in this epoch, and so may promote itself), "-" for none.
// In the struct, -1 stands for "m" and, in InSync, for "-".
type EpochData struct {
	Epoch  int64
	Holder int // -1: the master; N >= 0: slave N
	InSync int // -1: none; N >= 0: slave N
}

// Bytes encodes d.
func (d EpochData) Bytes() []byte {
	b := strconv.AppendInt(nil, d.Epoch, 10)
	b = append(b, ' ')
	b = append(b, memberName(d.Holder, "m")...)
	b = append(b, ' ')
	return append(b, memberName(d.InSync, "-")...)
}

func (d EpochData) String() string { return string(d.Bytes()) }

func memberName(n int, none string) string {
	if n < 0 {
		return none
	}
	return "s" + strconv.Itoa(n)
}

// ParseEpochData parses the data of ids/<id>/epoch.
func ParseEpochData(b []byte) (EpochData, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return EpochData{}, fmt.Errorf("epoch node %q: want \"<epoch> <holder> <insync>\"", b)
	}
	e, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || e <= 0 {
		return EpochData{}, fmt.Errorf("epoch node %q: epoch %q is not a positive integer", b, f[0])
	}
	h, err := parseMember(f[1], "m")
	if err != nil {
		return EpochData{}, fmt.Errorf("epoch node %q: holder: %v", b, err)
	}
	s, err := parseMember(f[2], "-")
	if err != nil {
		return EpochData{}, fmt.Errorf("epoch node %q: insync: %v", b, err)
	}
	return EpochData{Epoch: e, Holder: h, InSync: s}, nil
}

func parseMember(s, none string) (int, error) {
	if s == none {
		return -1, nil
	}
	n, ok := strings.CutPrefix(s, "s")
	v, err := strconv.Atoi(n)
	if !ok || err != nil || v < 0 || v > 1023 || strconv.Itoa(v) != n {
		return 0, fmt.Errorf("%q is neither %q nor s<0..1023>", s, none)
	}
	return v, nil
}

// OffsetData is an offset node's data, MetaQ's "<msgId>-<offset>".
func OffsetData(msgID, offset int64) []byte {
	b := strconv.AppendInt(nil, msgID, 10)
	b = append(b, '-')
	return strconv.AppendInt(b, offset, 10)
}

// ParseOffsetData reads an offset node's data: "<msgId>-<offset>", or the
// bare "<offset>" MetaQ wrote before 1.4 (msgId -1), split at the last '-'
// unless it is the first character, as MetaQ's ZkOffsetStorage does
// (surrounding white space is ignored). The offset must not be negative.
func ParseOffsetData(b []byte) (offset, msgID int64, err error) {
	s := strings.TrimSpace(string(b))
	msgID = -1
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if msgID, err = strconv.ParseInt(s[:i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("offset node %q: msgId %q is not a number", b, s[:i])
		}
		s = s[i+1:]
	}
	if offset, err = strconv.ParseInt(s, 10, 64); err != nil || offset < 0 {
		return 0, 0, fmt.Errorf("offset node %q: offset %q is not a non-negative number", b, s)
	}
	return offset, msgID, nil
}
