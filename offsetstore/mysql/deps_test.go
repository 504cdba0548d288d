package mysql_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBrokerDoesNotLinkDriver: only the mysql plugin's main links the
// MySQL driver; the broker and the CLI never do (the reason the store is a
// plugin binary).
func TestBrokerDoesNotLinkDriver(t *testing.T) {
	t.Parallel()
	const driver = "github.com/go-sql-driver/mysql"
	for _, pkg := range []string{
		"github.com/metaq-go/metaq/cmd/metaq-server",
		"github.com/metaq-go/metaq/cmd/metaq",
		"github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == driver || strings.HasPrefix(dep, driver+"/") {
				t.Errorf("%s links %s", pkg, driver)
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/metaq-go/metaq/cmd/metaq-offsetstore-mysql").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), driver) {
		t.Errorf("the mysql plugin does not link %s: is the check looking at the right package?", driver)
	}
}
