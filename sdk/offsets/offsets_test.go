package offsets_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// TestStandardLibraryOnly: the contract links nothing but the standard
// library and the module's own packages.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/metaq-go/metaq/sdk/offsets").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, "github.com/metaq-go/metaq/") {
			t.Errorf("sdk/offsets links %s", dep)
		}
	}
}

func TestValidate(t *testing.T) {
	good := message.Position{Topic: "t", Partition: message.Partition{BrokerID: 1, Partition: 2}, Offset: 3, MsgID: -1}
	if err := offsets.ValidateCommit("g", []message.Position{good}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		group string
		p     message.Position
		load  bool // ValidateLoad refuses it too
	}{
		"group":     {"a\x00b", good, true},
		"topic":     {"g", message.Position{Partition: good.Partition}, true},
		"broker":    {"g", message.Position{Topic: "t", Partition: message.Partition{BrokerID: -1}}, true},
		"partition": {"g", message.Position{Topic: "t", Partition: message.Partition{Partition: -1}}, true},
		"offset":    {"g", message.Position{Topic: "t", Offset: -1}, false},
	} {
		err := offsets.ValidateCommit(c.group, []message.Position{good, c.p})
		if !errors.Is(err, offsets.ErrInvalid) {
			t.Errorf("%s: ValidateCommit: %v", name, err)
		}
		if strings.ContainsAny(err.Error(), "\x00") {
			t.Errorf("%s: the error echoes a control byte: %q", name, err)
		}
		if err := offsets.ValidateLoad(c.group, []message.Position{c.p}); (err != nil) != c.load {
			t.Errorf("%s: ValidateLoad: %v", name, err)
		}
	}
	if got := offsets.NotStored(good); got.Offset != -1 || got.MsgID != -1 || got.Topic != "t" || got.Partition != good.Partition {
		t.Errorf("NotStored: %+v", got)
	}
}
