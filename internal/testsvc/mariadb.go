package testsvc

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDBUser is the account tests connect as over TCP (with a random
// password per server). It may create and drop databases.
const MariaDBUser = "metaq"

func probeMariaDB() error {
	for _, b := range []string{"mariadbd", "mariadb-install-db", "mariadb"} {
		if _, err := lookPath(b); err != nil {
			return fmt.Errorf("mariadb-server package not installed: %w", err)
		}
	}
	return nil
}

// lookPath finds a binary on PATH or in the sbin directories (which a
// non-root PATH may lack).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// MariaDBServer is a MariaDB started by this package: mariadbd on
// 127.0.0.1 with a scratch data directory made by mariadb-install-db, run
// as the mysql user when the tests run as root.
type MariaDBServer struct {
	mu       sync.Mutex
	port     int
	dir      string
	password string
	proc     *proc
	admin    *sql.DB // MariaDBUser, no default database
	dbs      atomic.Int64
}

var sharedDB shared[MariaDBServer]

// MariaDB returns the DSN (go-sql-driver format) of a fresh, empty
// database on the MariaDB shared by the test binary (see Main), starting
// the server on first use. The database is dropped when t ends. Without
// Main, t gets a server of its own.
func MariaDB(t testing.TB) string {
	t.Helper()
	return SharedMariaDB(t).NewDatabase(t)
}

// NewMariaDB starts a MariaDB of t's own, stopped and removed when t ends.
// A test may Stop, Kill and Start it again (same port, same data).
func NewMariaDB(t testing.TB) *MariaDBServer {
	t.Helper()
	m, err := startMariaDB()
	if err != nil {
		unavailable(t, "MariaDB", err)
	}
	t.Cleanup(m.close)
	return m
}

func startMariaDB() (*MariaDBServer, error) {
	if err := ensureInstalled("mariadb", probeMariaDB); err != nil {
		return nil, err
	}
	dir, err := scratchDir("mariadb")
	if err != nil {
		return nil, err
	}
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	m := &MariaDBServer{dir: dir, password: hex.EncodeToString(pw[:])}
	if err := m.install(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := StartOnFreePort(func(port int) error { m.port = port; return m.Start() }); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

// mysqlUser is the account mariadbd runs as: mysql when we are root (the
// server refuses to run as root without being told), else ourselves.
func mysqlUser() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("no mysql user (is mariadb-server installed?): %w", err)
	}
	return u, nil
}

// asUser makes cmd run as u (nil: as ourselves).
func asUser(cmd *exec.Cmd, u *user.User) error {
	if u == nil {
		return nil
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("mysql user has uid %q gid %q", u.Uid, u.Gid)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return nil
}

func chownTo(path string, u *user.User) error {
	if u == nil {
		return nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Lchown(path, uid, gid)
}

// install creates the system tables in dir/data and the init file that
// creates MariaDBUser at every start.
func (m *MariaDBServer) install() error {
	u, err := mysqlUser()
	if err != nil {
		return err
	}
	if err := chownTo(m.dir, u); err != nil {
		return err
	}
	// /run/mysqld is where the packaged server keeps its socket; ours is in
	// dir, but tools expect the directory to exist.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/mysqld", 0o755); err == nil {
			_ = chownTo("/run/mysqld", u)
		}
	}
	bin, err := lookPath("mariadb-install-db")
	if err != nil {
		return err
	}
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(m.dir, "data"),
		"--auth-root-authentication-method=socket", "--skip-test-db", "--innodb-log-file-size=8M"}
	if u != nil {
		args = append(args, "--user="+u.Username)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = m.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mariadb-install-db: %v\n%s", err, tail(out.Bytes(), 3000))
	}
	initSQL := fmt.Sprintf("CREATE USER IF NOT EXISTS '%[1]s'@'127.0.0.1' IDENTIFIED BY '%[2]s';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'127.0.0.1' WITH GRANT OPTION;\n", MariaDBUser, m.password)
	initFile := filepath.Join(m.dir, "init.sql")
	if err := os.WriteFile(initFile, []byte(initSQL), 0o600); err != nil {
		return err
	}
	return chownTo(initFile, u)
}

// Addr is the server's "127.0.0.1:port".
func (m *MariaDBServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
}

// Password is MariaDBUser's password.
func (m *MariaDBServer) Password() string { return m.password }

// DSN is the go-sql-driver DSN for database db (may be empty) as
// MariaDBUser over TCP.
func (m *MariaDBServer) DSN(db string) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = MariaDBUser, m.password, "tcp", m.Addr(), db
	c.Timeout = 10 * time.Second
	return c.FormatDSN()
}

// Start starts the server (again, after Stop or Kill: same port and data)
// and waits until MariaDBUser can log in over TCP.
func (m *MariaDBServer) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return nil
	}
	u, err := mysqlUser()
	if err != nil {
		return err
	}
	bin, err := lookPath("mariadbd")
	if err != nil {
		return err
	}
	logFile := filepath.Join(m.dir, "server.log")
	// Its temporary tables in a directory of its own, not the shared /tmp
	// (a make test run once failed a query with "Error on delete of
	// '/tmp/#sql-temptable-...MAI' (Errcode: 2)").
	tmp := filepath.Join(m.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	if err := chownTo(tmp, u); err != nil {
		return err
	}
	args := []string{"--no-defaults",
		"--datadir=" + filepath.Join(m.dir, "data"),
		"--tmpdir=" + tmp,
		"--socket=" + filepath.Join(m.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"),
		"--log-error=" + logFile,
		"--init-file=" + filepath.Join(m.dir, "init.sql"),
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(m.port),
		"--skip-name-resolve", "--skip-log-bin",
		"--character-set-server=utf8mb4",
		"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=8M", "--max-connections=500",
	}
	if u != nil {
		args = append(args, "--user="+u.Username)
	}
	cmd := exec.Command(bin, args...)
	if err := asUser(cmd, u); err != nil {
		return err
	}
	cmd.Dir = m.dir
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	if err := chownTo(logFile, u); err != nil {
		return err
	}
	p, err := startProc("mariadbd", cmd, logFile)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		p.kill()
		return err
	}
	db.SetMaxOpenConns(4)
	err = p.waitReady(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
	if err != nil {
		db.Close()
		p.kill()
		return err
	}
	if m.admin != nil {
		m.admin.Close()
	}
	m.proc, m.admin = p, db
	return nil
}

// NewDatabase creates an empty database for t, dropped when t ends, and
// returns its DSN.
func (m *MariaDBServer) NewDatabase(t testing.TB) string {
	t.Helper()
	name := dbName(t.Name(), m.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.db().ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("testsvc: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if db := m.db(); db != nil && !m.stopped() {
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		}
	})
	return m.DSN(name)
}

func (m *MariaDBServer) db() *sql.DB {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.admin
}

func (m *MariaDBServer) stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc == nil || m.proc.exited()
}

// dbName turns a test name into a database name: lowercase letters,
// digits and underscores, at most 64 characters, unique by n.
func dbName(test string, n int64) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 48 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("%s_%d", b.String(), n)
}

// Client runs the mariadb command-line client as MariaDBUser over TCP on
// database db with `-e query` in batch mode (tab-separated, no headers)
// and returns its output.
func (m *MariaDBServer) Client(t testing.TB, db, query string) (string, error) {
	t.Helper()
	bin, err := lookPath("mariadb")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--no-defaults", "--protocol=TCP", "-h127.0.0.1", "-P"+strconv.Itoa(m.port),
		"-u"+MariaDBUser, "--batch", "--skip-column-names", "-D", db, "-e", query)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+m.password)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("mariadb -e %q: %v: %s", query, err, stderr.String())
	}
	return stdout.String(), nil
}

// Stop shuts the server down (SIGTERM), keeping its data.
func (m *MariaDBServer) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.proc.stop()
}

// Kill kills the server (SIGKILL), keeping its data (InnoDB recovers it at
// the next Start).
func (m *MariaDBServer) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.proc.kill()
}

func (m *MariaDBServer) close() {
	m.mu.Lock()
	if m.admin != nil {
		m.admin.Close()
		m.admin = nil
	}
	m.mu.Unlock()
	m.Kill()
	os.RemoveAll(m.dir)
}

// SharedMariaDB returns the shared server itself (starting it if needed),
// for tests that need its client or address; tests must not stop it.
// Without Main, t gets a server of its own.
func SharedMariaDB(t testing.TB) *MariaDBServer {
	t.Helper()
	if !sharing() {
		return NewMariaDB(t)
	}
	return sharedDB.get(t, "MariaDB", startMariaDB, (*MariaDBServer).close)
}
