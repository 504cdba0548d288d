// Command metaq-server runs a metaq-go broker.
//
//	metaq-server --config conf/server.toml [--port N] [--data-dir DIR] [--broker-id N] [--slave-id N] [--host ADDR] [--zk CONNECT]
//
// Flags override the file, so one file can start several brokers. --zk sets
// [zookeeper] connect (cluster mode: the broker registers in ZooKeeper).
// SIGINT and SIGTERM stop the broker; SIGHUP reloads the [tls]
// certificates (Broker.ReloadTLS).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("metaq-server", flag.ContinueOnError)
	config := fs.String("config", "conf/server.toml", "server configuration `file` (TOML)")
	port := fs.Int("port", -1, "listen port (overrides the file; 0 picks a free port)")
	host := fs.String("host", "", "listen address (overrides the file)")
	httpPort := fs.Int("http-port", -1, "HTTP listener port: metrics, health, admin API (overrides the file's http_port; 0 turns it off)")
	dataDir := fs.String("data-dir", "", "data `directory` (overrides the file)")
	brokerID := fs.Int("broker-id", -1, "broker id 0..1023 (overrides the file)")
	slaveID := fs.Int("slave-id", -2, "run as slave `N` (0..1023) of master --broker-id; -1 runs a master (overrides slave_id)")
	zkConnect := fs.String("zk", "", "ZooKeeper connect string `host:port[,host:port...]` (overrides [zookeeper] connect; enables cluster mode)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Println(broker.Version)
		return 0
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	cfg, err := conf.Load(*config)
	if err != nil {
		logger.Printf("config: %v", err)
		return 1
	}
	if *port >= 0 {
		cfg.Port = *port
	}
	if *host != "" {
		cfg.Host = *host
	}
	if *httpPort >= 0 {
		cfg.HTTPPort = *httpPort
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
	}
	if *brokerID >= 0 {
		cfg.BrokerID = *brokerID
	}
	if *slaveID >= -1 {
		cfg.SlaveID = *slaveID
	}
	if *zkConnect != "" {
		cfg.ZooKeeper.Connect = *zkConnect
	}
	if err := cfg.Validate(); err != nil {
		logger.Printf("config: %v", err)
		return 1
	}
	b, err := broker.New(cfg, broker.Options{Logf: logger.Printf})
	if err != nil {
		logger.Printf("start: %v", err)
		return 1
	}
	if err := b.Start(); err != nil {
		logger.Printf("start: %v", err)
		b.Close()
		return 1
	}
	addr := b.Addr()
	if a := b.TLSAddr(); a != "" {
		logger.Printf("metaq-server tls on %s", a)
		if addr == "" {
			addr = a // TLS only (port = 0)
		}
	}
	// Tests and scripts read the bound address from this line.
	logger.Printf("metaq-server ready on %s data %s", addr, cfg.DataDir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var s os.Signal
	for s = range sig {
		if s != syscall.SIGHUP {
			break
		}
		// SIGHUP reloads the TLS certificates; a bad new one keeps the old.
		if err := b.ReloadTLS(); err != nil {
			logger.Printf("SIGHUP: reload TLS: %v (keeping the current certificate)", err)
		} else {
			logger.Printf("SIGHUP: reloaded TLS certificates from %s", cfg.TLS.CertFile)
		}
	}
	logger.Printf("received %v, shutting down", s)
	if err := b.Close(); err != nil {
		logger.Printf("close: %v", err)
		return 1
	}
	return 0
}
