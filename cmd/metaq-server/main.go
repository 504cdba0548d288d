// Command metaq-server runs a metaq-go broker.
//
//	metaq-server --config conf/server.toml [--port N] [--http-port N] [--data-dir DIR] [--broker-id N] [--slave-id N] [--host ADDR] [--zk CONNECT]
//	metaq-server --check-config FILE [flags]
//
// Flags override the file, so one file can start several brokers. --zk sets
// [zookeeper] connect (cluster mode: the broker registers in ZooKeeper).
//
// Signals (docs/operations.md):
//   - SIGTERM and SIGINT stop the broker gracefully, from the moment the
//     process starts (also while it waits for ZooKeeper at start-up): it
//     stops accepting, answers what its connections already sent, flushes
//     and checkpoints the journal, unregisters from ZooKeeper and exits 0,
//     within 10 s.
//   - SIGHUP reloads the configuration file without dropping a connection
//     (Broker.Reload): users and ACLs, TLS certificates, log levels, limits
//     and live topic settings apply; the rest is logged as needing a
//     restart. A file that does not validate is rejected with a log line
//     and the running configuration stays.
//
// --check-config validates FILE (flags applied) as a start would, without
// opening the data directory or starting plugins, and exits 0 if it is
// good, 1 with every problem on standard error if not.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/logx"
)

// stopTimeout bounds a graceful stop; drainTimeout is the part of it that
// connections get to finish what they sent.
const (
	stopTimeout  = 10 * time.Second
	drainTimeout = 6 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// overrides are the flags that override the file.
type overrides struct {
	port, httpPort, brokerID, slaveID int
	host, dataDir, zk                 string
}

func (o overrides) apply(cfg *conf.Config) {
	if o.port >= 0 {
		cfg.Port = o.port
	}
	if o.host != "" {
		cfg.Host = o.host
	}
	if o.httpPort >= 0 {
		cfg.HTTPPort = o.httpPort
	}
	if o.slaveID >= -1 {
		cfg.SlaveID = o.slaveID
	}
	if o.dataDir != "" {
		cfg.DataDir = o.dataDir
	}
	if o.brokerID >= 0 {
		cfg.BrokerID = o.brokerID
	}
	if o.zk != "" {
		cfg.ZooKeeper.Connect = o.zk
	}
}

// load reads and validates path with the flags applied.
func (o overrides) load(path string) (*conf.Config, error) {
	cfg, err := conf.Load(path)
	if err != nil {
		return nil, err
	}
	o.apply(cfg)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func run(args []string) int {
	// Signals first: from here on SIGTERM, SIGINT and SIGHUP never kill
	// the process outright.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	fs := flag.NewFlagSet("metaq-server", flag.ContinueOnError)
	config := fs.String("config", "conf/server.toml", "server configuration `file` (TOML)")
	check := fs.String("check-config", "", "validate the configuration `file` (flags applied) and exit: 0 if good, 1 if not")
	var o overrides
	fs.IntVar(&o.port, "port", -1, "listen port (overrides the file; 0 picks a free port)")
	fs.StringVar(&o.host, "host", "", "listen address (overrides the file)")
	fs.IntVar(&o.httpPort, "http-port", -1, "HTTP listener port: metrics, health, admin API (overrides the file's http_port; 0 turns it off)")
	fs.StringVar(&o.dataDir, "data-dir", "", "data `directory` (overrides the file)")
	fs.IntVar(&o.brokerID, "broker-id", -1, "broker id 0..1023 (overrides the file)")
	fs.IntVar(&o.slaveID, "slave-id", -2, "run as slave `N` (0..1023) of master --broker-id; -1 runs a master (overrides slave_id)")
	fs.StringVar(&o.zk, "zk", "", "ZooKeeper connect string `host:port[,host:port...]` (overrides [zookeeper] connect; enables cluster mode)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "metaq-server: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *version {
		fmt.Println(broker.Version)
		return 0
	}
	if *check != "" {
		return checkConfig(*check, o)
	}

	// Until the file says otherwise: text at info.
	root, _ := logx.NewHandler(os.Stderr, logx.FormatText)
	var bootLevel slog.LevelVar
	log := slog.New(logx.Filter(root, &bootLevel))
	cfg, err := o.load(*config)
	if err != nil {
		log.Error("config: " + err.Error())
		return 1
	}
	if root, err = logx.NewHandler(os.Stderr, cfg.LogFormat); err != nil {
		log.Error("config: " + err.Error())
		return 1
	}
	b, err := broker.New(cfg, broker.Options{LogHandler: root})
	if err != nil {
		slog.New(root).Error("start: " + err.Error())
		return 1
	}
	log = b.Logger()
	reload := false
	// A signal during recovery (New) is acted on now, before listening.
	select {
	case s := <-sigs:
		if s != syscall.SIGHUP {
			log.Info(fmt.Sprintf("received %v during start-up, shutting down", s))
			return stop(b, log)
		}
		reload = true
	default:
	}

	// Start: in cluster mode it waits (at most connection_timeout) for the
	// first ZooKeeper registration; a SIGTERM meanwhile stops it.
	started := make(chan error, 1)
	go func() { started <- b.Start() }()
	for starting := true; starting; {
		select {
		case err := <-started:
			if err != nil {
				log.Error("start: " + err.Error())
				b.Close()
				return 1
			}
			starting = false
		case s := <-sigs:
			if s == syscall.SIGHUP {
				log.Info("SIGHUP during start-up: reloading once started")
				reload = true
				continue
			}
			log.Info(fmt.Sprintf("received %v during start-up, shutting down", s))
			b.AbortStart()
			<-started
			return stop(b, log)
		}
	}
	addr := b.Addr()
	if a := b.TLSAddr(); a != "" {
		log.Info("metaq-server tls on " + a)
		if addr == "" {
			addr = a // TLS only (port = 0)
		}
	}
	// Tests and scripts read the bound address from this line.
	log.Info(fmt.Sprintf("metaq-server ready on %s data %s", addr, cfg.DataDir))
	if reload {
		reloadConfig(b, log, *config, o)
	}
	for s := range sigs {
		if s == syscall.SIGHUP {
			reloadConfig(b, log, *config, o)
			continue
		}
		log.Info(fmt.Sprintf("received %v, shutting down", s))
		break
	}
	return stop(b, log)
}

// stop shuts the broker down gracefully and returns the exit code. A
// watchdog ends the process if the stop takes longer than stopTimeout.
func stop(b *broker.Broker, log *slog.Logger) int {
	watchdog := time.AfterFunc(stopTimeout, func() {
		log.Error(fmt.Sprintf("shutdown did not finish within %v; exiting", stopTimeout))
		os.Exit(1)
	})
	defer watchdog.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		log.Error("shutdown: " + err.Error())
		return 1
	}
	return 0
}

// reloadConfig is SIGHUP: load the file again and apply it, or log why
// not and keep the running configuration.
func reloadConfig(b *broker.Broker, log *slog.Logger, path string, o overrides) {
	next, err := o.load(path)
	if err == nil {
		if probs := broker.CheckConfig(next); len(probs) > 0 {
			err = fmt.Errorf("%s", strings.Join(probs, "; "))
		}
	}
	var rep broker.ReloadReport
	if err == nil {
		rep, err = b.Reload(next)
	}
	if err != nil {
		log.Error("SIGHUP: reload of "+path+" rejected; the running configuration stays", "error", err.Error())
		return
	}
	for _, c := range rep.Applied {
		log.Info("SIGHUP: applied: " + c)
	}
	for _, c := range rep.NeedRestart {
		log.Warn("SIGHUP: needs a restart, not applied: " + c)
	}
	if !rep.Changed() {
		log.Info("SIGHUP: reloaded " + path + ": nothing changed")
	} else {
		log.Info(fmt.Sprintf("SIGHUP: reloaded %s: %d applied, %d need a restart", path, len(rep.Applied), len(rep.NeedRestart)))
	}
}

// checkConfig is --check-config.
func checkConfig(path string, o overrides) int {
	cfg, err := o.load(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 1
	}
	if probs := broker.CheckConfig(cfg); len(probs) > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d problem(s):\n", path, len(probs))
		for _, p := range probs {
			fmt.Fprintf(os.Stderr, "  %s\n", p)
		}
		return 1
	}
	fmt.Printf("%s: configuration OK (%d topic(s), %d plugin(s), %s mode)\n", path, len(cfg.Topics), len(cfg.Plugins), mode(cfg))
	return 0
}

func mode(cfg *conf.Config) string {
	if cfg.ZooKeeper.Enabled() {
		return "cluster"
	}
	return "local"
}
