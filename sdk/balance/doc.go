// Package balance holds the consumer-group balancing functions: given the
// members of a group and the partitions of a topic, which partitions one
// member should own. They are pure and deterministic, so every member
// computes its own share from the same inputs (ZooKeeper's
// consumers/<g>/ids and topics-sub children, or a local broker's member
// list) and, together, the members own every partition exactly once.
//
// Two strategies follow MetaQ's LoadBalanceStrategy implementations:
//
//   - [Default] (MetaQ's DEFAULT): consumers sorted, partitions sorted,
//     each consumer takes a consecutive run; extra consumers sit idle.
//   - [Consistent] (MetaQ's CONSIST): a Ketama ring with 160 points per
//     consumer, so a member leaving moves only its own partitions.
//
// A member computes its own share with [Strategy.Assign]. A coordinator
// that needs every member's share (a local broker) uses [AssignAll], which
// sorts and hashes once for the whole group, or keeps a [Group], which
// also carries the sorted ids and the [Consistent] ring from one
// membership change to the next.
//
// # Partition order differs from MetaQ
//
// MetaQ sorts the "<brokerId>-<partition>" strings as text, so "0-10"
// comes before "0-2" and "10-0" before "2-0". [Default] sorts partitions
// numerically by (brokerId, partition) instead, which gives each consumer
// a run of neighbouring partitions. The two orders assign partitions
// differently as soon as a broker has more than ten partitions or there
// are more than ten brokers, so Java MetaQ consumers and metaq-go
// consumers using [Default] must not be mixed in one group: they would
// disagree on ownership, and partitions would be fought over or left
// unowned. [DefaultMetaQStringOrder] reproduces MetaQ's text order exactly
// for groups that have to interoperate. [Consistent] does not depend on
// any order and matches MetaQ's CONSIST.
package balance
