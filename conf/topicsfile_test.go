package conf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTopicsFileRoundTrip(t *testing.T) {
	four, no := 4, false
	f := &TopicsFile{Deleted: []string{"old"}, Topics: []Topic{{Name: "b", NumPartitions: &four}, {Name: "a", AcceptPublish: &no}}}
	data, err := f.Encode()
	require.NoError(t, err)
	g, err := ParseTopicsFile(data, "topics.toml")
	require.NoError(t, err, "%s", data)
	require.Equal(t, []string{"old"}, g.Deleted)
	require.Len(t, g.Topics, 2)
	require.Equal(t, "a", g.Topics[0].Name)
	require.Equal(t, 4, *g.Topics[1].NumPartitions)

	c := Default()
	c.Topics = []Topic{{Name: "old"}, {Name: "b"}, {Name: "keep"}}
	require.NoError(t, c.ApplyTopics(g))
	require.Equal(t, []string{"keep", "a", "b"}, c.TopicNames())
	tc, ok := c.TopicConfig("b")
	require.True(t, ok)
	require.Equal(t, 4, tc.NumPartitions)
}

func TestTopicsFileBad(t *testing.T) {
	for _, in := range []string{
		"nope = 1\n",
		"deleted = [\"a/b\"]\n",
		"[[topic]]\nname = \"x\"\nbogus = 1\n",
		"[[topic\n",
	} {
		_, err := ParseTopicsFile([]byte(in), "topics.toml")
		require.Error(t, err, "%q", in)
	}
	c := Default()
	c.Topics = []Topic{{Name: "a"}}
	zero := 0
	err := c.ApplyTopics(&TopicsFile{Topics: []Topic{{Name: "b", NumPartitions: &zero}}})
	require.ErrorContains(t, err, "num_partitions")
	require.Equal(t, []string{"a"}, c.TopicNames(), "unchanged after an error")
}

// FuzzParseTopicsFile: any input is parsed or refused, never a panic;
// what parses encodes and parses again.
func FuzzParseTopicsFile(f *testing.F) {
	f.Add([]byte("deleted = [\"a\"]\n[[topic]]\nname = \"x\"\nnum_partitions = 3\n"))
	f.Add([]byte("[[topic]]\nname = \"y\"\n[[topic.filter]]\ngroup = \"g\"\nfilter = \"attribute\"\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		tf, err := ParseTopicsFile(data, "topics.toml")
		if err != nil {
			return
		}
		out, err := tf.Encode()
		if err != nil {
			return // e.g. a value TOML cannot render back
		}
		if _, err := ParseTopicsFile(out, "again"); err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
	})
}
