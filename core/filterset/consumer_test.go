package filterset

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConnFilters(t *testing.T) {
	var f ConnFilters
	require.Nil(t, f.Lookup("t", []byte("g")))
	require.NoError(t, f.Set("t", "g", []byte(" \r\n")), "clearing nothing")
	require.NoError(t, f.Set("t", "g", []byte("  tag == \"a\"\n")))
	require.NotNil(t, f.Lookup("t", []byte("g")))
	require.Nil(t, f.Lookup("t", []byte("h")))

	var fe *FilterError
	require.ErrorAs(t, f.Set("t", "h", []byte("tag == ")), &fe)
	require.Contains(t, fe.Msg, "filter: ")
	require.Nil(t, f.Lookup("t", []byte("h")), "a refused filter is not registered")

	for i := 1; i < MaxConnFilters; i++ {
		require.NoError(t, f.Set("t", "g"+strconv.Itoa(i), []byte(`tag == "a"`)))
	}
	require.ErrorAs(t, f.Set("t", "over", []byte(`tag == "a"`)), &fe)
	require.Contains(t, fe.Msg, "filters, the limit")
	require.NoError(t, f.Set("t", "g", []byte(`tag == "b"`)), "replacing one is not over the limit")
	require.NoError(t, f.Set("t", "g", nil))
	require.Nil(t, f.Lookup("t", []byte("g")))
	require.NoError(t, f.Set("t", "over", []byte(`tag == "a"`)), "room again once one is cleared")
}
