package mysql_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyMySQLPackagesLinkDriver: the txn contract, the builtin file
// coordinator and the suite never link the MySQL driver; only txn/mysql
// and its plugin binary do.
func TestOnlyMySQLPackagesLinkDriver(t *testing.T) {
	t.Parallel()
	const driver = "github.com/go-sql-driver/mysql"
	for _, pkg := range []string{
		"github.com/metaq-go/metaq/txn",
		"github.com/metaq-go/metaq/txn/file",
		"github.com/metaq-go/metaq/txn/txntest",
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
	out, err := exec.Command("go", "list", "-deps", pluginPkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), driver) {
		t.Errorf("the plugin does not link %s: is the check looking at the right package?", driver)
	}
}
