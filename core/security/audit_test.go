package security

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/logx"
)

// TestAudit checks an audit line: the user ("-" without auth), the
// client's names shown, and the changes cut at AuditMaxChanges.
func TestAudit(t *testing.T) {
	logs := &testLog{}
	a := NewAudit(slog.New(logx.PrintfHandler(logs.Logf)), strconv.Quote)
	a.Log("", "10.0.0.1:5", "api", "topic.create", "topic", "a b", "partitions", 2)
	a.Log("alice", "10.0.0.1:6", "protocol", "group.reset", "group", "g", "offsets", AuditChanges(40, func(i int) (int, int64, int64) { return i, -1, int64(i) }))
	out := logs.String()
	require.Contains(t, out, `audit: topic.create component=audit user=- remote=10.0.0.1:5 via=api action=topic.create topic="\"a b\"" partitions=2`)
	require.Contains(t, out, `user="\"alice\"" remote=10.0.0.1:6 via=protocol action=group.reset group="\"g\"" offsets="p0:-1->0 p1:-1->1 `)
	require.Contains(t, out, ` p31:-1->31 ... (8 more)"`)
}

// TestLoginFailedNameCut: a failed login quotes at most 64 bytes of the
// user name it was given, as every other reply quotes a client's name.
func TestLoginFailedNameCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("u", 900)
	got := LoginFailed(long)
	require.Less(t, len(got), 120, got)
	require.Contains(t, got, `"`+strings.Repeat("u", 64)+`"...`)
}
