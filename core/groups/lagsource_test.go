package groups

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// committedSeeds are FuzzCommittedFile's seeds and TestCommittedFile's
// cases: valid files first.
var committedSeeds = []string{
	`{"version":1,"broker_id":0,"groups":[]}`,
	`{"version":1,"broker_id":7,"groups":[{"group":"g","topic":"t","offsets":[[-1,0],[140,1764633600000]]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"a","topic":"t","offsets":[]},{"group":"b","topic":"t.x","offsets":[[0,1]]}]}`,
	``,
	`{`,
	`[]`,
	`{"version":2,"broker_id":0,"groups":[]}`,
	`{"version":1,"broker_id":-1,"groups":[]}`,
	`{"version":1,"broker_id":0,"groups":[],"extra":1}`,
	`{"version":1,"broker_id":0,"groups":[]} {}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"bad group","topic":"t","offsets":[]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"a/b","offsets":[]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[[-2,0]]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[[1,-1]]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[[1]]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[[1,2,3]]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[]},{"group":"g","topic":"t","offsets":[]}]}`,
	`{"version":1,"broker_id":0,"groups":[{"group":"g","topic":"t","offsets":[[1e99,0]]}]}`,
}

func TestCommittedFile(t *testing.T) {
	for i, s := range committedSeeds {
		_, _, err := parseCommittedFile([]byte(s))
		if i < 3 {
			require.NoError(t, err, s)
		} else {
			require.Error(t, err, s)
		}
	}
	id, m, err := parseCommittedFile([]byte(committedSeeds[1]))
	require.NoError(t, err)
	require.Equal(t, 7, id)
	require.Equal(t, []commitAt{{-1, 0}, {140, 1764633600000}}, m[GroupTopic{"g", "t"}])
}

// FuzzCommittedFile: committed-offsets.json that parses encodes and
// parses back to the same; nothing panics.
func FuzzCommittedFile(f *testing.F) {
	for _, s := range committedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id, m, err := parseCommittedFile(data)
		if err != nil {
			return
		}
		enc, err := encodeCommittedFile(id, m)
		require.NoError(t, err)
		id2, m2, err := parseCommittedFile(enc)
		require.NoError(t, err, "%s", enc)
		require.Equal(t, id, id2)
		if !reflect.DeepEqual(m, m2) && (len(m) != 0 || len(m2) != 0) {
			t.Fatalf("round trip: %v, then %v", m, m2)
		}
	})
}
