// Package groups is the broker's consumer-group component: the groups it
// coordinates in local mode (Coordinator: join, heartbeat, leave and the
// partitions each member may fetch), the consumer-offset store the wire's
// commit and fetch go through (Offsets), and the committed offsets behind
// lag (Committed: the commits seen here, saved across restarts, merged
// with what ZooKeeper keeps in cluster mode).
//
// Nothing here speaks the protocol: the methods return values and typed
// errors (*Error, *StoreError), and core/broker turns them into replies
// (groupsglue.go there). The HTTP API and the dashboard read the same
// values, so that a second wire protocol can sit on them too.
package groups
