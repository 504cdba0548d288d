package conf

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const oneTopic = "[[topic]]\nname = \"t\"\n"

// parseErr parses src, requires an *Error and returns it.
func parseErr(t *testing.T, src string) *Error {
	t.Helper()
	c, err := Parse([]byte(src), "server.toml")
	require.Nil(t, c)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "server.toml", ce.File)
	require.NotEmpty(t, ce.Problems)
	return ce
}

func TestSampleFileIsValid(t *testing.T) {
	c, err := Load("server.toml")
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, "server.toml", c.Path())
	require.Equal(t, []string{"meta-test", "meta-fast"}, c.TopicNames())
	require.Equal(t, "127.0.0.1:8123", c.Addr())
	require.Equal(t, 4, c.NumPartitions)
	require.Equal(t, 0, c.UnflushThreshold)
	require.Contains(t, string(c.Raw()), `name = "meta-fast"`)

	// Every key of Config and Topic is documented in the sample.
	for k := range topFields {
		set := strings.Contains(string(c.Raw()), "\n"+k+" = ")
		// http_port is documented commented out: unset, it follows port.
		commented := k == "http_port" && strings.Contains(string(c.Raw()), "\n# "+k+" = ")
		require.True(t, set || commented, "sample does not set %s", k)
	}
	for k := range topicFields {
		require.Contains(t, string(c.Raw()), k, "sample does not mention %s", k)
	}

	fast, ok := c.TopicConfig("meta-fast")
	require.True(t, ok)
	require.Equal(t, TopicConfig{
		Name: "meta-fast", NumPartitions: 8, UnflushThreshold: 1000, UnflushInterval: time.Second,
		DataDir: "data", DeletePolicy: "delete,24", RetainFor: 24 * time.Hour,
		AcceptPublish: true, AcceptSubscribe: true, Stat: true,
	}, fast)
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(oneTopic), "x.toml")
	require.NoError(t, err)
	want := Default()
	want.Topics = []Topic{{Name: "t"}}
	require.Equal(t, want.BrokerID, c.BrokerID)
	require.Equal(t, "127.0.0.1", c.Host)
	require.Equal(t, 8123, c.Port)
	require.Equal(t, "data", c.DataDir)
	require.Equal(t, 1, c.NumPartitions)
	require.Equal(t, 0, c.UnflushThreshold)
	require.Equal(t, 10000, c.UnflushInterval)
	require.Equal(t, int64(1073741824), c.MaxSegmentSize)
	require.Equal(t, int64(64<<20), c.JournalFileSize)
	require.Equal(t, int64(64<<20), c.JournalCheckpointBytes)
	require.Equal(t, 1000, c.JournalCheckpointInterval)
	require.Equal(t, 2097152, c.MaxTransferSize)
	require.Equal(t, 1048576, c.MaxMessageSize)
	require.Equal(t, 1024, c.MaxLineLength)
	require.Equal(t, "delete,168", c.DeletePolicy)
	require.Equal(t, 300, c.DeleteCheckInterval)
	require.False(t, c.AutoCreateTopics)
	require.True(t, c.AcceptPublish)
	require.True(t, c.AcceptSubscribe)
	require.True(t, c.Stat)
	require.Equal(t, "info", c.LogLevel)
	require.Equal(t, want.Topics, c.Topics)
	require.Equal(t, "x.toml", c.Path())
	require.Equal(t, oneTopic, string(c.Raw()))

	tc, ok := c.TopicConfig("t")
	require.True(t, ok)
	require.Equal(t, TopicConfig{
		Name: "t", NumPartitions: 1, UnflushInterval: 10 * time.Second, DataDir: "data",
		DeletePolicy: "delete,168", RetainFor: 168 * time.Hour,
		AcceptPublish: true, AcceptSubscribe: true, Stat: true,
	}, tc)

	_, ok = c.TopicConfig("other")
	require.False(t, ok, "unknown topic without auto_create_topics")

	// Default() alone has no topics.
	require.ErrorContains(t, Default().Validate(), "at least one [[topic]]")
	d := Default()
	d.AutoCreateTopics = true
	require.NoError(t, d.Validate())
}

func TestOverridesAndInheritance(t *testing.T) {
	src := `
broker_id = 7
host = "0.0.0.0"
port = 9000
data_dir = "/var/lib/metaq"
num_partitions = 3
unflush_threshold = 100
unflush_interval = 500
delete_policy = "delete,30m"
accept_publish = false
stat = false
auto_create_topics = true
log_level = "debug"

[[topic]]
name = "inherit"

[[topic]]
name = "over.ride_1"
num_partitions = 16
unflush_threshold = 0
unflush_interval = 0
data_dir = "/ssd"
delete_policy = "delete,2"
accept_publish = true
accept_subscribe = false
stat = true
`
	c, err := Parse([]byte(src), "s.toml")
	require.NoError(t, err)
	require.Equal(t, []string{"inherit", "over.ride_1"}, c.TopicNames())
	require.Equal(t, "0.0.0.0:9000", c.Addr())

	inh, ok := c.TopicConfig("inherit")
	require.True(t, ok)
	require.Equal(t, TopicConfig{
		Name: "inherit", NumPartitions: 3, UnflushThreshold: 100, UnflushInterval: 500 * time.Millisecond,
		DataDir: "/var/lib/metaq", DeletePolicy: "delete,30m", RetainFor: 30 * time.Minute,
		AcceptPublish: false, AcceptSubscribe: true, Stat: false,
	}, inh)

	ov, ok := c.TopicConfig("over.ride_1")
	require.True(t, ok)
	require.Equal(t, TopicConfig{
		Name: "over.ride_1", NumPartitions: 16, UnflushThreshold: 0, UnflushInterval: 0,
		DataDir: "/ssd", DeletePolicy: "delete,2", RetainFor: 2 * time.Hour,
		AcceptPublish: true, AcceptSubscribe: false, Stat: true,
	}, ov)

	// Auto-created topics get the top-level settings, but only valid names.
	auto, ok := c.TopicConfig("new-topic")
	require.True(t, ok)
	inh.Name = "new-topic"
	require.Equal(t, inh, auto)
	for _, bad := range []string{"", "../etc", "a/b", "*", "a b", strings.Repeat("x", MaxTopicNameLen+1)} {
		_, ok := c.TopicConfig(bad)
		require.False(t, ok, "%q", bad)
	}
}

func TestAutoCreateWithoutTopics(t *testing.T) {
	c, err := Parse([]byte("auto_create_topics = true\n"), "s.toml")
	require.NoError(t, err)
	require.Empty(t, c.TopicNames())
	tc, ok := c.TopicConfig("x")
	require.True(t, ok)
	require.Equal(t, 1, tc.NumPartitions)
}

func TestValidationErrors(t *testing.T) {
	cases := []struct {
		name, src string
		key, msg  string
		line      int
	}{
		{"broker id high", "broker_id = 1024\n" + oneTopic, "broker_id", "must be between 0 and 1023, got 1024", 1},
		{"broker id negative", "broker_id = -1\n" + oneTopic, "broker_id", "must be between 0 and 1023, got -1", 1},
		{"host empty", "host = \"\"\n" + oneTopic, "host", "must not be empty", 1},
		{"host with port", "host = \"localhost:8123\"\n" + oneTopic, "host", "must not include a port", 1},
		{"host space", "host = \"a b\"\n" + oneTopic, "host", "must be a host name or IP address", 1},
		{"allowed host with port", "http_allowed_hosts = [\"a.example\", \"b.example:8120\"]\n" + oneTopic, "http_allowed_hosts", `entry 1 must be a host name`, 1},
		{"allowed host url", "http_allowed_hosts = [\"http://a.example\"]\n" + oneTopic, "http_allowed_hosts", `got "http://a.example"`, 1},
		{"allowed host empty", "http_allowed_hosts = [\"\"]\n" + oneTopic, "http_allowed_hosts", `entry 0 must be a host name`, 1},
		{"allowed host wildcard part", "http_allowed_hosts = [\"*.example\"]\n" + oneTopic, "http_allowed_hosts", `got "*.example"`, 1},
		{"port negative", "port = -1\n" + oneTopic, "port", "must be between 0 and 65535, got -1", 1},
		{"port high", "\nport = 65536\n" + oneTopic, "port", "must be between 0 and 65535, got 65536", 2},
		{"port type", "port = \"8123\"\n" + oneTopic, "port", `must be an integer, got string "8123"`, 1},
		{"port float", "port = 8123.5\n" + oneTopic, "port", "must be an integer, got float 8123.5", 1},
		{"data dir empty", "data_dir = \" \"\n" + oneTopic, "data_dir", "must not be empty", 1},
		{"partitions zero", "num_partitions = 0\n" + oneTopic, "num_partitions", "must be between 1 and 1024, got 0", 1},
		{"partitions high", "num_partitions = 1025\n" + oneTopic, "num_partitions", "must be between 1 and 1024, got 1025", 1},
		{"threshold negative", "unflush_threshold = -1\n" + oneTopic, "unflush_threshold", "must be >= 0, got -1", 1},
		{"interval negative", "unflush_interval = -5\n" + oneTopic, "unflush_interval", "must be between 0 and 86400000, got -5", 1},
		{"segment small", "max_segment_size = 4095\n" + oneTopic, "max_segment_size", "must be >= 4096, got 4095", 1},
		{"recovery unknown", "recovery = \"repair\"\n" + oneTopic, "recovery", `must be "quarantine" or "truncate", got "repair"`, 1},
		{"recovery control", "recovery = \"x\\u001b\"\n" + oneTopic, "recovery", `got "x\x1b"`, 1},
		{"journal file small", "journal_file_size = 4096\n" + oneTopic, "journal_file_size", "must be between 1048576 and 1073741824, got 4096", 1},
		{"journal checkpoint bytes small", "journal_checkpoint_bytes = 1\n" + oneTopic, "journal_checkpoint_bytes", "must be >= 1048576, got 1", 1},
		{"journal checkpoint sync unknown", "journal_checkpoint_sync = \"sync\"\n" + oneTopic, "journal_checkpoint_sync", `must be "auto" or "fsync", got "sync"`, 1},
		{"journal fdatasync unknown", "journal_fdatasync = \"raw\"\n" + oneTopic, "journal_fdatasync", `must be "auto" or "blocking", got "raw"`, 1},
		{"journal checkpoint interval zero", "journal_checkpoint_interval = 0\n" + oneTopic, "journal_checkpoint_interval", "must be between 10 and 3600000, got 0", 1},
		{"tx flush high", "flush_tx_log_at_commit = 3\n" + oneTopic, "flush_tx_log_at_commit", "must be 0 (fsync left to the OS), 1 (fsync at every prepare, commit and rollback) or 2 (fsync once a second), got 3", 1},
		{"tx flush negative", "flush_tx_log_at_commit = -1\n" + oneTopic, "flush_tx_log_at_commit", "got -1", 1},
		{"replication password alone", "replication_password = \"pw\"\n" + oneTopic, "replication_password", "needs replication_user", 1},
		{"replication user newline", "replication_user = \"a\\nb\"\n" + oneTopic, "replication_user", "may not hold NUL", 1},
		{"tx flush type", "flush_tx_log_at_commit = true\n" + oneTopic, "flush_tx_log_at_commit", "must be an integer, got boolean true", 1},
		{"tx timeout zero", "tx_default_timeout = 0\n" + oneTopic, "tx_default_timeout", "must be between 1 and 86400, got 0", 1},
		{"tx max bytes small", "tx_max_bytes = 10\n" + oneTopic, "tx_max_bytes", "must be >= 1024, got 10", 1},
		{"tx buffered below max", "tx_max_bytes = 4096\ntx_max_buffered_bytes = 2048\n" + oneTopic, "tx_max_buffered_bytes", "must be >= tx_max_bytes (4096), got 2048", 2},
		{"transfer huge", "max_transfer_size = 2000000000\n" + oneTopic, "max_transfer_size", "must be between 21 and 1073741824", 1},
		{"message zero", "max_message_size = 0\n" + oneTopic, "max_message_size", "must be >= 1, got 0", 1},
		{"message too big", "max_transfer_size = 1000\nmax_message_size = 981\n" + oneTopic, "max_message_size",
			"plus the 20-byte record header must be <= max_transfer_size (1000), got 981", 2},
		{"line short", "max_line_length = 63\n" + oneTopic, "max_line_length", "must be between 64 and 65536, got 63", 1},
		{"line long", "max_line_length = 65537\n" + oneTopic, "max_line_length", "must be between 64 and 65536, got 65537", 1},
		{"policy unit", "delete_policy = \"delete,3d\"\n" + oneTopic, "delete_policy", `invalid delete policy "delete,3d"`, 1},
		{"policy archive", "delete_policy = \"archive,168,true\"\n" + oneTopic, "delete_policy", "not supported", 1},
		{"check interval", "delete_check_interval = 0\n" + oneTopic, "delete_check_interval", "must be between 1 and 86400, got 0", 1},
		{"log level", "log_level = \"INFO\"\n" + oneTopic, "log_level", `must be one of debug, info, warn, error, got "INFO"`, 1},
		{"bool type", "stat = \"yes\"\n" + oneTopic, "stat", `must be a boolean (true or false), got string "yes"`, 1},
		{"string type", "log_level = 1\n" + oneTopic, "log_level", "must be a string, got integer 1", 1},
		{"no topics", "port = 1\n", "topic", "at least one [[topic]] is required unless auto_create_topics = true", 0},
		{"topic not array", "topic = \"x\"\n", "topic", "must be an array of tables ([[topic]]), got string", 1},
		{"topic table", "[topic]\nname = \"x\"\n", "topic", "must be an array of tables ([[topic]]), got table", 1},
		{"topic name missing", "[[topic]]\nnum_partitions = 2\n", "topic[0].name", "is required", 1}, // the [[topic]] header
		{"topic name bad", "[[topic]]\nname = \"a/b\"\n", "topic[0].name", `invalid topic name "a/b": '/' (a path separator) at byte 1; a topic name must be 1..200 bytes`, 2},
		{"topic name dot", "[[topic]]\nname = \".\"\n", "topic[0].name", `invalid topic name ".": reserved`, 2},
		{"topic name dotdot", "[[topic]]\nname = \"..\"\n", "topic[0].name", `invalid topic name "..": reserved`, 2},
		{"topic wildcard", "[[topic]]\nname = \"*\"\n", "topic[0].name", "auto_create_topics", 2},
		{"topic name type", "[[topic]]\nname = 5\n", "topic[0].name", "must be a string, got integer 5", 2},
		{"topic duplicate", oneTopic + "\n[[topic]]\n# again\nname = \"t\"\n", "topic[1].name",
			`duplicate topic "t" (first declared as topic[0])`, 6},
		{"topic partitions", oneTopic + "num_partitions = 0\n", "topic[0].num_partitions", "must be between 1 and 1024, got 0", 3},
		{"topic threshold", oneTopic + "unflush_threshold = -2\n", "topic[0].unflush_threshold", "must be >= 0, got -2", 3},
		{"topic interval", oneTopic + "unflush_interval = 86400001\n", "topic[0].unflush_interval", "must be between 0 and 86400000", 3},
		{"topic data dir", oneTopic + "data_dir = \"\"\n", "topic[0].data_dir", "must not be empty", 3},
		{"topic policy", oneTopic + "delete_policy = \"keep\"\n", "topic[0].delete_policy", `invalid delete policy "keep"`, 3},
		{"topic bool", oneTopic + "accept_publish = 0\n", "topic[0].accept_publish", "must be a boolean", 3},
		{"topic int overflow", oneTopic + "num_partitions = 9223372036854775807\n", "topic[0].num_partitions", "must be between 1 and 1024", 3},
		// The HTTP listener's limits (conf/http.go).
		{"http max connections low", "http_max_connections = 15\n" + oneTopic, "http_max_connections", "must be between 16 and 65536, got 15", 1},
		{"http max connections high", "http_max_connections = 65537\n" + oneTopic, "http_max_connections", "must be between 16 and 65536, got 65537", 1},
		{"http read header timeout zero", "http_read_header_timeout = 0\n" + oneTopic, "http_read_header_timeout", "must be between 100 and 60000, got 0", 1},
		{"http read header timeout high", "http_read_header_timeout = 60001\n" + oneTopic, "http_read_header_timeout", "must be between 100 and 60000, got 60001", 1},
		{"http idle timeout zero", "http_idle_timeout = 0\n" + oneTopic, "http_idle_timeout", "must be between 100 and 300000, got 0", 1},
		{"http idle timeout high", "http_idle_timeout = 300001\n" + oneTopic, "http_idle_timeout", "must be between 100 and 300000, got 300001", 1},
		{"http idle timeout type", "http_idle_timeout = \"30s\"\n" + oneTopic, "http_idle_timeout", `must be an integer, got string "30s"`, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := parseErr(t, tc.src)
			require.Len(t, e.Problems, 1, e.Error())
			p := e.Problems[0]
			require.Equal(t, tc.key, p.Key)
			require.Contains(t, p.Msg, tc.msg)
			require.Equal(t, tc.line, p.Line, e.Error())
			require.Contains(t, e.Error(), tc.key)
			require.NotContains(t, e.Error(), "\n")
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := parseErr(t, "[[topic]]\nname = \"a\"\n\n[[topic]]\nname = \"b\"\nnum_partitions = 0\n")
	require.Equal(t, "server.toml:6: topic[1].num_partitions: must be between 1 and 1024, got 0", e.Error())

	e = &Error{File: "f.toml", Problems: []Problem{{Key: "topic[1].num_partitions", Msg: "must be >= 1, got 0"}}}
	require.Equal(t, "f.toml: topic[1].num_partitions: must be >= 1, got 0", e.Error())
	require.Equal(t, "f.toml: invalid configuration", (&Error{File: "f.toml"}).Error())
}

func TestManyProblemsAtOnce(t *testing.T) {
	src := `port = -1
unflush_treshold = 5
num_partitions = "four"
log_level = "loud"

[[topic]]
name = "a"
num_partitions = 0

[[topic]]
name = "a"
delete_policy = "archive,1"
`
	e := parseErr(t, src)
	require.Equal(t, strings.Join([]string{
		"server.toml:1: port: must be between 0 and 65535, got -1",
		`server.toml:2: unknown key "unflush_treshold" (did you mean "unflush_threshold"?)`,
		`server.toml:3: num_partitions: must be an integer, got string "four"`,
		`server.toml:4: log_level: must be one of debug, info, warn, error, got "loud"`,
		"server.toml:8: topic[0].num_partitions: must be between 1 and 1024, got 0",
		`server.toml:11: topic[1].name: duplicate topic "a" (first declared as topic[0])`,
		`server.toml:12: topic[1].delete_policy: archive policy "archive,1" is not supported; use "delete,N" with N in hours, or "delete,Ns", "delete,Nm", "delete,Nh"`,
	}, "\n"), e.Error())
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct{ src, want string }{
		{"unflush_treshold = 1\n" + oneTopic, `server.toml:1: unknown key "unflush_treshold" (did you mean "unflush_threshold"?)`},
		{"prot = 1\n" + oneTopic, `server.toml:1: unknown key "prot" (did you mean "port"?)`},
		{"unflushThreshold = 1\n" + oneTopic, `server.toml:1: unknown key "unflushThreshold" (did you mean "unflush_threshold"?)`},
		{"serverPort = 1\n" + oneTopic, `server.toml:1: unknown key "serverPort" (MetaQ's serverPort is "port" here)`},
		{"dataPath = \"x\"\n" + oneTopic, `server.toml:1: unknown key "dataPath" (MetaQ's dataPath is "data_dir" here)`},
		{"completely_unrelated = 1\n" + oneTopic, `server.toml:1: unknown key "completely_unrelated"`},
		{oneTopic + "[system]\nbrokerId = 1\n", `server.toml:3: unknown key "system" (there is no [system] table; set broker keys at the top level)`},
		{oneTopic + "num_partiton = 2\n", `server.toml:3: unknown key "topic[0].num_partiton" (did you mean "num_partitions"?)`},
		{oneTopic + "port = 2\n", `server.toml:3: unknown key "topic[0].port" (cannot be set per topic)`},
		{oneTopic + "[topic.extra]\nx = 1\n", `server.toml:3: unknown key "topic[0].extra"`},
		{"\"quoted key\" = 1\n" + oneTopic, `server.toml:1: unknown key "quoted key"`},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, parseErr(t, tc.src).Error(), tc.src)
	}
}

func TestSyntaxError(t *testing.T) {
	e := parseErr(t, "port = 8123\nhost = \"x\"\nbroker_id = = 2\n")
	require.Len(t, e.Problems, 1)
	require.Equal(t, 3, e.Problems[0].Line)
	require.Equal(t, "", e.Problems[0].Key)
	require.Regexp(t, `^server.toml:3: syntax error at column \d+: `, e.Error())

	e = parseErr(t, "port = 1\nport = 2\n")
	require.Equal(t, 2, e.Problems[0].Line)
	require.Contains(t, e.Error(), "syntax error")
}

func TestLinesSkipMultilineValues(t *testing.T) {
	src := "data_dir = \"\"\"\nx\n\"\"\"\nlog_level = '''\n[[topic]]\n'''\n" +
		"# [[topic]]\n[[topic]]\nname = \"a\" # c\n[[topic]]\n\"name\" = \"b\"\nnum_partitions = [\n1,\n]\n"
	lines := keyLines([]byte(src))
	require.Equal(t, map[string]int{
		"data_dir": 1, "log_level": 4, "topic[0]": 8, "topic[0].name": 9,
		"topic[1]": 10, "topic[1].name": 11, "topic[1].num_partitions": 12,
	}, lines)
	e := parseErr(t, src)
	require.Contains(t, e.Error(), "server.toml:12: topic[1].num_partitions: must be an integer, got array")
	require.Contains(t, e.Error(), "server.toml:4: log_level: must be one of")
}

func TestValidateAfterOverride(t *testing.T) {
	c, err := Parse([]byte("port = 8123\n"+oneTopic), "s.toml")
	require.NoError(t, err)
	require.NoError(t, c.Validate())

	// A bad flag value is reported without blaming a line of the file.
	c.Port = 70000
	c.BrokerID = 2000
	c.DataDir = ""
	err = c.Validate()
	var ce *Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "s.toml: broker_id: must be between 0 and 1023, got 2000\n"+
		"s.toml: port: must be between 0 and 65535, got 70000\n"+
		"s.toml: data_dir: must not be empty", err.Error())

	c.Port, c.BrokerID, c.DataDir = 1, 3, "/tmp/x"
	require.NoError(t, c.Validate())
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.toml")
	require.True(t, errors.Is(err, fs.ErrNotExist))
}

func TestParseDeletePolicy(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"delete,168", 168 * time.Hour, ""},
		{"delete,1", time.Hour, ""},
		{"delete,30s", 30 * time.Second, ""},
		{"delete,10m", 10 * time.Minute, ""},
		{"delete,2h", 2 * time.Hour, ""},
		{" delete , 5h ", 5 * time.Hour, ""},
		{"delete,0", 0, "must be >= 1"},
		{"delete,0s", 0, "must be >= 1"},
		{"delete,-1", 0, "invalid delete policy"},
		{"delete,+1", 0, "invalid delete policy"},
		{"delete,1.5h", 0, "invalid delete policy"},
		{"delete,5d", 0, "invalid delete policy"},
		{"delete,5hm", 0, "invalid delete policy"},
		{"delete,5H", 0, "invalid delete policy"},
		{"delete,h", 0, "invalid delete policy"},
		{"delete,", 0, "invalid delete policy"},
		{"delete", 0, "invalid delete policy"},
		{"delete,1,2", 0, "invalid delete policy"},
		{"delete,5 h", 0, "invalid delete policy"},
		{"", 0, "invalid delete policy"},
		{"remove,5", 0, "invalid delete policy"},
		{"archive,168", 0, "not supported"},
		{"archive,168,true", 0, "not supported"},
		{"delete,2562047h", 2562047 * time.Hour, ""},
		{"delete,2562048h", 0, "out of range"},
		{"delete,99999999999999999999", 0, "out of range"},
	}
	for _, tc := range cases {
		got, err := ParseDeletePolicy(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestValidTopicName(t *testing.T) {
	for _, s := range []string{"a", "meta-test", "A.b_c-9", strings.Repeat("x", MaxTopicNameLen)} {
		require.True(t, ValidTopicName(s), s)
	}
	for _, s := range []string{"", "*", "a b", "a/b", `a\b`, "é", "a:b", strings.Repeat("x", MaxTopicNameLen+1)} {
		require.False(t, ValidTopicName(s), s)
	}
}

func TestEditDistance(t *testing.T) {
	require.Equal(t, 0, editDistance("port", "port"))
	require.Equal(t, 1, editDistance("prt", "port"))
	require.Equal(t, 2, editDistance("prot", "port"))
	require.Equal(t, 3, editDistance("p", "port"))
	require.Equal(t, "", closest("xyzzy", topFields))
}

func TestZooKeeperTable(t *testing.T) {
	// Default: local mode.
	c, err := Parse([]byte(oneTopic), "x.toml")
	require.NoError(t, err)
	require.Equal(t, ZooKeeper{Root: "/meta", SessionTimeout: 30000, ConnectionTimeout: 30000}, c.ZooKeeper)
	require.False(t, c.ZooKeeper.Enabled())

	// The sample documents every key and still starts without ZooKeeper.
	s, err := Load("server.toml")
	require.NoError(t, err)
	require.False(t, s.ZooKeeper.Enabled())
	for k := range zkFields {
		require.Contains(t, string(s.Raw()), "\n# "+k+" = ", "sample does not show %s", k)
	}

	c, err = Parse([]byte("port = 1\n[zookeeper]\nconnect = \"a:1, b:2\"\nroot = \"/x/y\"\nsession_timeout = 4000\nconnection_timeout = 1000\n"+oneTopic), "x.toml")
	require.NoError(t, err)
	require.Equal(t, ZooKeeper{Connect: "a:1, b:2", Root: "/x/y", SessionTimeout: 4000, ConnectionTimeout: 1000}, c.ZooKeeper)
	require.True(t, c.ZooKeeper.Enabled())
	require.Equal(t, []string{"a:1", "b:2"}, c.ZooKeeper.Servers())
	require.Equal(t, []string{"t"}, c.TopicNames())

	// Problems are collected and positioned.
	e := parseErr(t, oneTopic+"[zookeeper]\nconnect = \"h:1/chroot\"\nroot = \"meta\"\nsession_timeout = 999\nconnection_timeout = 0\n")
	require.Equal(t, strings.Join([]string{
		`server.toml:4: zookeeper.connect: must not have a chroot suffix (set zookeeper.root instead), got "h:1/chroot"`,
		`server.toml:5: zookeeper.root: must start with "/", got "meta"`,
		"server.toml:6: zookeeper.session_timeout: must be >= 1000, got 999",
		"server.toml:7: zookeeper.connection_timeout: must be >= 1000, got 0",
	}, "\n"), e.Error())
	e = parseErr(t, oneTopic+"[zookeeper]\nroot = \"/meta/\"\nsession_timeout = \"x\"\nzkConnect = \"h:1\"\nconect = \"h:1\"\n")
	require.Equal(t, strings.Join([]string{
		`server.toml:4: zookeeper.root: must not end with "/", got "/meta/"`,
		`server.toml:5: zookeeper.session_timeout: must be an integer, got string "x"`,
		`server.toml:6: unknown key "zookeeper.zkConnect" (MetaQ's zkConnect is "connect" here)`,
		`server.toml:7: unknown key "zookeeper.conect" (did you mean "connect"?)`,
	}, "\n"), e.Error())
	e = parseErr(t, "zookeeper = \"h:1\"\n"+oneTopic)
	require.Equal(t, `server.toml:1: zookeeper: must be a table ([zookeeper]), got string`, e.Error())

	// Validate sees flag overrides.
	c, err = Parse([]byte(oneTopic), "x.toml")
	require.NoError(t, err)
	c.ZooKeeper.Root = ""
	require.ErrorContains(t, c.Validate(), `zookeeper.root: must start with "/"`)
}

// TestReplicationLinkKeys: the replication link's credentials and CA
// parse, and stats config redacts the password.
// TestHTTPLimitKeys checks the HTTP listener's limits: their defaults,
// and values set in the file.
func TestHTTPLimitKeys(t *testing.T) {
	c, err := Parse([]byte(oneTopic), "x.toml")
	require.NoError(t, err)
	require.Equal(t, 512, c.HTTPMaxConnections)
	require.Equal(t, 5000, c.HTTPReadHeaderTimeout)
	require.Equal(t, 30000, c.HTTPIdleTimeout)
	c, err = Parse([]byte("http_max_connections = 16\nhttp_read_header_timeout = 100\nhttp_idle_timeout = 300000\n"+oneTopic), "x.toml")
	require.NoError(t, err)
	require.Equal(t, 16, c.HTTPMaxConnections)
	require.Equal(t, 100, c.HTTPReadHeaderTimeout)
	require.Equal(t, 300000, c.HTTPIdleTimeout)
}

func TestReplicationLinkKeys(t *testing.T) {
	c, err := Parse([]byte("replication_user = \"repl\"\nreplication_password = \"s3cret\"\nreplication_tls_ca_file = \"/etc/ca.pem\"\n"+oneTopic), "x.toml")
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, "repl", c.ReplicationUser)
	require.Equal(t, "s3cret", c.ReplicationPassword)
	require.Equal(t, "/etc/ca.pem", c.ReplicationTLSCAFile)
	r := string(c.Redacted())
	require.NotContains(t, r, "s3cret")
	require.Contains(t, r, Redacted)
	require.Contains(t, r, "repl")
}

// TestHTTPPortFollowsPort: unset, http_port is port − 3, so brokers started
// from one file with different ports get different HTTP ports (issue 23:
// brokers 2 and 3 of the walkthrough failed with "address already in use").
func TestHTTPPortFollowsPort(t *testing.T) {
	for _, tc := range []struct {
		top  string
		want string
	}{
		{"", "127.0.0.1:8120"},
		{"port = 8124", "127.0.0.1:8121"},
		{"port = 8125", "127.0.0.1:8122"},
		{"port = 0", "127.0.0.1:0"},
		{"port = 2", "127.0.0.1:8120"},
		{"port = 8124\nhttp_port = 9000", "127.0.0.1:9000"},
		{"port = 8446\ntls_port = 8443\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"", "127.0.0.1:8120"},
		{"port = 0\ntls_port = 8443\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"", "127.0.0.1:0"},
	} {
		c, err := Parse([]byte(tc.top+"\n[[topic]]\nname = \"t\"\n"), "server.toml")
		require.NoError(t, err, tc.top)
		got, on := c.HTTPAddr()
		require.True(t, on)
		require.Equal(t, tc.want, got, tc.top)
	}
	c, err := Parse([]byte("port = 8124\nhttp_port = 0\n[[topic]]\nname = \"t\"\n"), "server.toml")
	require.NoError(t, err)
	_, on := c.HTTPAddr()
	require.False(t, on)
	// --check-config catches listeners of one file that would share a port.
	for top, want := range map[string]string{
		"port = 8123\ntls_port = 8120\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"": "would be 8120",
		"port = 8443\ntls_port = 8443\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"": "tls_port: must differ from port",
		"port = 8123\nhttp_port = 8123": "http_port: must differ from port",
	} {
		_, err := Parse([]byte(top+"\n[[topic]]\nname = \"t\"\n"), "server.toml")
		require.ErrorContains(t, err, want, top)
	}
}

// TestValidateTopicName is the one topic-name rule every door uses.
func TestValidateTopicName(t *testing.T) {
	for _, ok := range []string{
		"t", "meta-test", "A.b_c-9", "a.b", "...", ".hidden", "x.", "a..b", "-", "_", "9",
		"orders.v2_eu-west", strings.Repeat("x", MaxTopicNameLen),
	} {
		require.NoError(t, ValidateTopicName(ok), "%q", ok)
		require.True(t, ValidTopicName(ok), "%q", ok)
	}
	for _, tc := range []struct{ name, why string }{
		{"", "empty"},
		{".", `".": reserved`},
		{"..", `"..": reserved`},
		{"a/b", "'/' (a path separator) at byte 1"},
		{"/", "'/'"},
		{"../etc", "'/' (a path separator) at byte 2"},
		{"\x00", "control character U+0000 at byte 0"},
		{"a\x01", "control character U+0001 at byte 1"},
		{"a\n", "U+000A"},
		{"a\x7f", "U+007F"},
		{"a\u0085", "control character U+0085"},
		{"a\ufff5", "U+FFF5 at byte 1, which a ZooKeeper node name cannot hold"},
		{"a\ue000", "U+E000 at byte 1, which a ZooKeeper node name cannot hold"},
		{"a\uffff", "U+FFFF"},
		{"a\xff", "invalid UTF-8 at byte 1"},
		{"\xed\xa0\x80", "invalid UTF-8 at byte 0"}, // a surrogate
		{"a b", `' ' at byte 1 is not allowed`},
		{"*", `'*' at byte 0 is not allowed`},
		{"é", `'é' at byte 0 is not allowed`},
		{"a:b", `':'`},
		{`a\b`, `'\\'`},
		{"zookeeper/x", "'/'"},
		{strings.Repeat("x", 250), "250 bytes, longer than 200"},
		{strings.Repeat("x", MaxTopicNameLen+1), "201 bytes, longer than 200"},
	} {
		err := ValidateTopicName(tc.name)
		require.ErrorIs(t, err, ErrBadTopicName, "%q", tc.name)
		require.False(t, ValidTopicName(tc.name), "%q", tc.name)
		msg := err.Error()
		require.Contains(t, msg, tc.why, "%q", tc.name)
		require.Contains(t, msg, TopicNameRule)
		require.True(t, strings.HasPrefix(msg, "invalid topic name "), msg)
		for _, c := range []byte(msg) {
			require.False(t, c < 0x20 || c == 0x7f, "error %q holds a control byte", msg)
		}
	}
	// At most 64 bytes of a long name are quoted.
	err := ValidateTopicName(strings.Repeat("y", 800<<10))
	require.Less(t, len(err.Error()), 300)
	require.Contains(t, err.Error(), `"`+strings.Repeat("y", 64)+`"...`)
	err = ValidateTopicName(strings.Repeat("é", 150)) // cut between runes, never inside one
	require.Contains(t, err.Error(), `"`+strings.Repeat("é", 32)+`"...`)
}

// TestTopicsFileBadNames: a topics.toml naming "." or ".." (a topic or a
// deleted one) is refused when it is parsed, with the validator's message.
func TestTopicsFileBadNames(t *testing.T) {
	for _, tc := range []struct{ in, key, msg string }{
		{"[[topic]]\nname = \".\"\n", "topic[0].name", `invalid topic name ".": reserved`},
		{"[[topic]]\nname = \"ok\"\n[[topic]]\nname = \"..\"\n", "topic[1].name", `invalid topic name "..": reserved`},
		{"deleted = [\"..\"]\n", "deleted", `invalid topic name "..": reserved`},
		{"[[topic]]\nname = \"a\\u0001\"\n", "topic[0].name", "control character U+0001"},
	} {
		_, err := ParseTopicsFile([]byte(tc.in), "topics.toml")
		require.Error(t, err, "%q", tc.in)
		require.Contains(t, err.Error(), tc.key, "%q", tc.in)
		require.Contains(t, err.Error(), tc.msg, "%q", tc.in)
		require.Contains(t, err.Error(), TopicNameRule, "%q", tc.in)
	}
	// Applied on top of server.toml (ApplyTopics validates too).
	c := Default()
	c.Topics = []Topic{{Name: "a"}}
	err := c.ApplyTopics(&TopicsFile{Topics: []Topic{{Name: ".."}}})
	require.ErrorContains(t, err, `invalid topic name "..": reserved`)
}
