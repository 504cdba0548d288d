package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/mysql"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// One MariaDB for the package (a fresh database per test); fault tests
// start their own.
func TestMain(m *testing.M) { testsvc.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, conf map[string]string) *mysql.Store {
	t.Helper()
	s := mysql.New()
	require.NoError(t, s.Init(ctx(t), &offsetstore.InitRequest{Config: conf}))
	t.Cleanup(func() { s.Close() })
	return s
}

func sqlDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return open(t, map[string]string{"dsn": dsn})
	})
}

func TestConformanceWrapped(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return offsetstore.Wrap(open(t, map[string]string{"dsn": dsn, "table": "wrapped"}), 0)
	})
}

func TestDurable(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store {
		return open(t, map[string]string{"dsn": dsn})
	})
}

// TestSchema checks the table Init creates: MetaQ's columns with BIGINT
// offset and msg_id, the unique key, and rows as MetaQ lays them out,
// read with the real mariadb client and information_schema.
func TestSchema(t *testing.T) {
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	dsn := srv.NewDatabase(t)
	s := open(t, map[string]string{"dsn": dsn})
	require.NoError(t, commit(ctx(t), s, []entry{
		{Key: key{Group: "g1", Topic: "meta-test", BrokerID: 0, Partition: 1}, Offset: 1 << 40, MsgID: 1<<62 + 1},
		{Key: key{Group: "g1", Topic: "meta-test", BrokerID: 3, Partition: 10}, Offset: 7, MsgID: -1},
	}))

	db := sqlDB(t, dsn)
	rows, err := db.QueryContext(ctx(t), "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, EXTRA FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'meta_topic_partition_group_offset' ORDER BY ORDINAL_POSITION")
	require.NoError(t, err)
	var cols []string
	for rows.Next() {
		var name, typ, null, extra string
		require.NoError(t, rows.Scan(&name, &typ, &null, &extra))
		cols = append(cols, strings.TrimSpace(name+" "+typ+" "+null+" "+extra))
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.Equal(t, []string{
		"id bigint(20) NO auto_increment",
		"topic varchar(255) NO",
		"partition varchar(255) NO",
		"group_id varchar(255) NO",
		"offset bigint(20) NO",
		"msg_id bigint(20) NO",
	}, cols)

	var idx string
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'meta_topic_partition_group_offset' AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'").Scan(&idx))
	require.Equal(t, "topic,partition,group_id", idx)

	name := dsnDB(t, dsn)
	ddl, err := srv.Client(t, name, "SHOW CREATE TABLE meta_topic_partition_group_offset")
	require.NoError(t, err)
	for _, want := range []string{"`offset` bigint(20) NOT NULL", "`msg_id` bigint(20) NOT NULL", "UNIQUE KEY `uk_topic_partition_group` (`topic`,`partition`,`group_id`)"} {
		require.Contains(t, ddl, want)
	}
	out, err := srv.Client(t, name, "SELECT topic, `partition`, group_id, `offset`, msg_id FROM meta_topic_partition_group_offset ORDER BY `partition`")
	require.NoError(t, err)
	require.Equal(t, "meta-test\t0-1\tg1\t1099511627776\t4611686018427387905\nmeta-test\t3-10\tg1\t7\t-1\n", out)
}

func dsnDB(t *testing.T, dsn string) string {
	t.Helper()
	i := strings.LastIndexByte(dsn, '/')
	require.Positive(t, i)
	name := dsn[i+1:]
	if q := strings.IndexByte(name, '?'); q >= 0 {
		name = name[:q]
	}
	return name
}

func TestCustomTable(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	s := open(t, map[string]string{"dsn": dsn, "table": "my_offsets"})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 2}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 5, MsgID: 6}}))
	var p string
	var off, id int64
	require.NoError(t, sqlDB(t, dsn).QueryRowContext(ctx(t), "SELECT `partition`, `offset`, msg_id FROM my_offsets WHERE group_id = 'g'").Scan(&p, &off, &id))
	require.Equal(t, "1-2", p)
	require.Equal(t, int64(5), off)
	require.Equal(t, int64(6), id)
}

// TestExistingMetaQTable: a table made with MetaQ's original DDL (int
// columns, a non-unique index) is refused with the fix, not used to
// truncate msgIds or grow duplicate rows; after the ALTER it works and
// keeps MetaQ's rows.
func TestExistingMetaQTable(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	db := sqlDB(t, dsn)
	_, err := db.ExecContext(ctx(t), "CREATE TABLE meta_topic_partition_group_offset ("+
		"id int(11) NOT NULL AUTO_INCREMENT, topic varchar(255) DEFAULT NULL, `partition` varchar(255) DEFAULT NULL, "+
		"group_id varchar(255) DEFAULT NULL, `offset` int(11) DEFAULT NULL, msg_id int(11) DEFAULT NULL, "+
		"PRIMARY KEY (id), KEY TOPIC_PARTITION_GROUP_ID (topic, `partition`, group_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx(t), "INSERT INTO meta_topic_partition_group_offset (topic, `partition`, group_id, `offset`, msg_id) VALUES ('t', '1-0', 'g', 100, -1)")
	require.NoError(t, err)

	err = mysql.New().Init(ctx(t), &offsetstore.InitRequest{Config: map[string]string{"dsn": dsn}})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
	for _, want := range []string{"offset is int, not BIGINT", "no UNIQUE key", "ALTER TABLE `meta_topic_partition_group_offset`"} {
		require.Contains(t, err.Error(), want)
	}

	_, err = db.ExecContext(ctx(t), "ALTER TABLE meta_topic_partition_group_offset MODIFY `offset` BIGINT NOT NULL, MODIFY `msg_id` BIGINT NOT NULL, "+
		"ADD UNIQUE KEY uk (topic, `partition`, group_id)")
	require.NoError(t, err)
	s := open(t, map[string]string{"dsn": dsn})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.True(t, res[0].Found, "MetaQ's row must be read")
	require.Equal(t, int64(100), res[0].Offset)
	require.Equal(t, int64(-1), res[0].MsgID)
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1 << 40, MsgID: 1 << 50}}))
	var n int
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM meta_topic_partition_group_offset").Scan(&n))
	require.Equal(t, 1, n, "an upsert, not a second row")
}

func TestNamesAreExact(t *testing.T) {
	t.Parallel()
	s := open(t, map[string]string{"dsn": testsvc.MariaDB(t)})
	a := key{Group: "G", Topic: "T", BrokerID: 1, Partition: 0}
	b := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	c := key{Group: "grüße-ß", Topic: "ü", BrokerID: 1, Partition: 0}
	d := key{Group: "grüsse-ss", Topic: "u", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: a, Offset: 1, MsgID: 1}, {Key: b, Offset: 2, MsgID: 2}, {Key: c, Offset: 3, MsgID: 3}}))
	res, err := load(ctx(t), s, []key{a, b, c, d})
	require.NoError(t, err)
	require.Equal(t, int64(1), res[0].Offset)
	require.Equal(t, int64(2), res[1].Offset)
	require.Equal(t, int64(3), res[2].Offset)
	require.False(t, res[3].Found, "names are compared exactly, not by collation")
}

func TestInvalidKeys(t *testing.T) {
	t.Parallel()
	s := open(t, map[string]string{"dsn": testsvc.MariaDB(t)})
	for _, k := range []key{
		{Group: "g ", Topic: "t"},
		{Group: "g", Topic: strings.Repeat("x", 256)},
		{Group: "g\xff", Topic: "t"},
		{Group: "", Topic: "t"},
		{Group: "g", Topic: "t", BrokerID: -1},
		// message.ValidateGroup: at most 255 bytes, no control bytes, no '/'.
		{Group: strings.Repeat("é", 128), Topic: "t"},
		{Group: "g\x00", Topic: "t"},
		{Group: "g'; DROP TABLE x; --", Topic: "t"}, // the spaces
		{Group: "a/b", Topic: "t"},
		{Group: "..", Topic: "t"},
	} {
		require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1}}), offsets.ErrInvalid, "%+v", k)
		_, err := load(ctx(t), s, []key{k})
		require.ErrorIs(t, err, offsets.ErrInvalid, "%+v", k)
	}
	long := key{Group: "g", Topic: strings.Repeat("é", 255)}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: long, Offset: 9}}), "a topic of 255 characters fits")
	// Quotes and other printable characters are plain values.
	for _, g := range []string{strings.Repeat("é", 127) + "x", `g';DROP--"\`, "日本語"} {
		k := key{Group: g, Topic: "t"}
		require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 7}}), "%q", g)
		res, err := load(ctx(t), s, []key{k})
		require.NoError(t, err)
		require.True(t, res[0].Found, "%q", g)
		require.Equal(t, int64(7), res[0].Offset)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	noDB := dsn[:strings.LastIndexByte(dsn, '/')+1]
	for name, conf := range map[string]map[string]string{
		"no dsn":       {},
		"bad dsn":      {"dsn": "not a dsn"},
		"no database":  {"dsn": noDB},
		"bad table":    {"dsn": dsn, "table": "x; DROP TABLE y"},
		"long table":   {"dsn": dsn, "table": strings.Repeat("t", 65)},
		"unknown key":  {"dsn": dsn, "tabel": "x"},
		"empty table ": {"dsn": dsn, "table": ""},
	} {
		t.Run(strings.TrimSpace(strings.ReplaceAll(name, " ", "_")), func(t *testing.T) {
			err := mysql.New().Init(ctx(t), &offsetstore.InitRequest{Config: conf})
			require.ErrorIs(t, err, offsetstore.ErrBadConfig)
			require.NotContains(t, err.Error(), testsvc.SharedMariaDB(t).Password(), "errors must not leak the password")
		})
	}
}

func TestNotInitializedAndClosed(t *testing.T) {
	t.Parallel()
	s := mysql.New()
	k := key{Group: "g", Topic: "t"}
	require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: k}}), offsetstore.ErrNotInitialized)
	_, err := load(ctx(t), s, []key{k})
	require.ErrorIs(t, err, offsetstore.ErrNotInitialized)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Init(ctx(t), &offsetstore.InitRequest{Config: map[string]string{"dsn": "u:p@tcp(127.0.0.1:1)/db"}}), offsets.ErrClosed)
}

// TestServerDown: with MariaDB down a commit fails (never a false
// success) and the error names the operation; once it is back the same
// store works again.
func TestServerDown(t *testing.T) {
	t.Parallel()
	srv := testsvc.NewMariaDB(t)
	dsn := srv.NewDatabase(t)
	s := open(t, map[string]string{"dsn": dsn})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}))

	srv.Kill()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := commit(c, s, []entry{{Key: k, Offset: 2, MsgID: 2}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "offsetstore/mysql: commit")
	_, err = load(c, s, []key{k})
	require.Error(t, err)

	require.NoError(t, srv.Start())
	require.Eventually(t, func() bool {
		return commit(ctx(t), s, []entry{{Key: k, Offset: 3, MsgID: 3}}) == nil
	}, 30*time.Second, 100*time.Millisecond)
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.Equal(t, int64(3), res[0].Offset)
}

func TestInitUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := mysql.New().Init(c, &offsetstore.InitRequest{Config: map[string]string{"dsn": "u:secret@tcp(127.0.0.1:1)/db"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "connect")
	require.NotContains(t, err.Error(), "secret")
	require.Less(t, time.Since(start), 6*time.Second)
}
