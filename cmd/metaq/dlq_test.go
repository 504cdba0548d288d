package main

import (
	"strings"
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
)

// TestCLIDLQList: metaq dlq list counts a group's dead letters per
// partition and says when its retry topic does not exist.
func TestCLIDLQList(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Edit(func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: "billing.dlq"})
	}))
	mustOK(t, cli("a\nb\n", "--addr", b.Addr(), "produce", "--topic", "billing.dlq", "--header", "metaq-last-error=boom"),
		"produce dead letters")
	r := cli("", "--addr", b.Addr(), "dlq", "list", "--group", "billing")
	mustOK(t, r, "dlq list")
	for _, want := range []string{"billing.retry absent\n", "billing.dlq messages 2\n", "messages 2 offsets 0.."} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("dlq list printed %q, want %q in it", r.stdout, want)
		}
	}
	r = cli("", "--addr", b.Addr(), "dlq", "show", "--group", "billing", "--json")
	mustOK(t, r, "dlq show")
	if n := strings.Count(r.stdout, `"metaq-last-error"`); n != 2 || !strings.Contains(r.stdout, `"boom"`) {
		t.Fatalf("dlq show printed %q", r.stdout)
	}
	if r := cli("", "--addr", b.Addr(), "dlq", "list"); r.code != 2 || !strings.Contains(r.stderr, "--group is required") {
		t.Fatalf("without --group: exit %d, stderr %q", r.code, r.stderr)
	}
}
