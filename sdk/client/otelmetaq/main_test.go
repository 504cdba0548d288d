package otelmetaq_test

import (
	"os"
	"testing"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// exampleAddr is the broker of the testable examples, started by TestMain.
var exampleAddr string

func TestMain(m *testing.M) {
	addr, _, stop := brokertest.StartMain("ex-otel")
	exampleAddr = addr
	code := testsvc.Run(m)
	stop()
	os.Exit(code)
}
