// Package e2e holds metaq-go's end-to-end reliability tests. They drive the
// broker over TCP with the raw sdk/protocol codec, so every byte on the wire
// is under the test's control, and check what comes back against the MetaQ
// reference (/work/shared/reference/metaq.md §1–§3, §12):
//
//   - TestCrashGroupCommit: SIGKILL of a real metaq-server process under
//     pipelined load; acknowledged messages must survive exactly once.
//   - TestTornTailRestart: truncated and corrupted last records are cut at
//     restart and never served.
//   - TestBadInput: malformed requests are answered or the connection is
//     closed, and nobody else is disturbed.
//   - TestHostileClients: floods, garbage, hoarded connections and
//     memory, stalled requests and join floods against a real metaq-server
//     process; it stays up, bounded in memory, and serves a good client.
//   - TestProtocolConformance: reply formats and semantics of every command.
//   - TestRetention: old sealed segments are deleted and min_offset rises.
//   - TestServerPortZero: port 0 picks a free port (binary and Broker.Start).
//
// The package has no non-test code besides this file.
package e2e
