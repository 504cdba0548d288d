package attr_test

import (
	"errors"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/attr"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/filters/internal/cases"
)

func TestConformance(t *testing.T) {
	filtertest.Run(t, func(*testing.T) filters.Filter { return attr.New() }, cases.Attr()...)
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []map[string]string{
		nil,
		{"color": "red"},
		{"exists": "maybe"},
		{"exists": "false", "equals": "red"},
	} {
		if _, _, err := attr.Compile(&filters.InitRequest{Config: cfg}); !errors.Is(err, filters.ErrBadConfig) {
			t.Errorf("config %v: err = %v, want ErrBadConfig", cfg, err)
		}
	}
}
