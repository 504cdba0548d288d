package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/protocol"
)

type rttResult struct {
	N          int           `json:"n"`
	EchoP50    time.Duration `json:"echo_p50_ns"`
	EchoP99    time.Duration `json:"echo_p99_ns"`
	BrokerP50  time.Duration `json:"broker_version_p50_ns,omitempty"`
	BrokerP99  time.Duration `json:"broker_version_p99_ns,omitempty"`
	BrokerErr  string        `json:"broker_error,omitempty"`
	BrokerAddr string        `json:"broker_addr,omitempty"`
}

// echoRTT measures 1-line request/reply round trips against an echo server
// on 127.0.0.1 running in its own process (this binary re-run as
// with METAQ_BENCH_ECHO_SERVER=1), so that, like a broker round trip, each one
// crosses between two processes: the floor for any broker round trip.
func echoRTT(ctx context.Context, n int) (p50, p99 time.Duration, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), echoServerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addrLine, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("echo server: %w", err)
	}
	addr := strings.TrimSpace(addrLine)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReader(c)
	req := []byte("version 1\r\n")
	rec := newLatRec(n)
	warm := min(n/10+1, 100)
	for i := range n + warm {
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return 0, 0, err
		}
		if _, err := r.ReadSlice('\n'); err != nil {
			return 0, 0, err
		}
		if i >= warm {
			rec.add(int64(time.Since(t0)))
		}
	}
	p50, p99, _ = percentiles(rec)
	return p50, p99, nil
}

// brokerRTT measures the broker's `version` round trip on one connection.
func brokerRTT(ctx context.Context, sec *security, addr string, n int) (p50, p99 time.Duration, err error) {
	rc, err := dialRaw(ctx, sec, addr)
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	rec := newLatRec(n)
	warm := min(n/10+1, 100)
	for i := range n + warm {
		t0 := time.Now()
		code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte { return protocol.AppendVersion(dst, op) })
		if err != nil {
			return 0, 0, err
		}
		if code != protocol.StatusOK {
			return 0, 0, fmt.Errorf("version: broker replied %d %s", code, body)
		}
		if i >= warm {
			rec.add(int64(time.Since(t0)))
		}
	}
	p50, p99, _ = percentiles(rec)
	return p50, p99, nil
}

func runRTTBench(ctx context.Context, sec *security, addr string, n int, timeout time.Duration) (rttResult, error) {
	res := rttResult{N: n, BrokerAddr: addr}
	var err error
	if res.EchoP50, res.EchoP99, err = echoRTT(ctx, n); err != nil {
		return res, fmt.Errorf("loopback echo: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, timeout+time.Duration(n)*time.Millisecond)
	defer cancel()
	if res.BrokerP50, res.BrokerP99, err = brokerRTT(bctx, sec, addr, n); err != nil {
		res.BrokerErr = err.Error()
		return res, fmt.Errorf("broker %s: %w", addr, err)
	}
	return res, nil
}

type rawResult struct {
	Dir        string        `json:"dir"`
	Size       int           `json:"size"`
	Batch      int           `json:"batch"`
	Records    int64         `json:"records"`
	Fdatasyncs int64         `json:"fdatasyncs"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	RecsPerS   float64       `json:"records_per_s"`
	MBPerS     float64       `json:"mb_per_s"`
	// Sync is the latency of each fdatasync (the call alone).
	Sync latSummary `json:"fdatasync"`
}

// runRawBench appends batches of batch size-byte records to a new file in
// dir, one write() and one fdatasync per batch, for d; the file is removed.
// One write per batch makes this the strongest baseline for the same
// number of records per fdatasync.
func runRawBench(ctx context.Context, dir string, size, batch int, d time.Duration) (rawResult, error) {
	res := rawResult{Dir: dir, Size: size, Batch: batch}
	if size <= 0 || batch <= 0 || d <= 0 {
		return res, errors.New("size, batch and duration must be positive")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	f, err := os.CreateTemp(dir, "metaq-raw-*.dat")
	if err != nil {
		return res, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte('a' + i%26)
	}
	chunk := bytes.Repeat(rec, batch)
	lat := newLatRec(latSampleLimit)
	t0 := time.Now()
	deadline := t0.Add(d)
	for {
		if _, err := f.Write(chunk); err != nil {
			return res, err
		}
		ts := time.Now()
		if err := fsutil.Fdatasync(f); err != nil {
			return res, err
		}
		lat.add(int64(time.Since(ts)))
		res.Records += int64(batch)
		res.Fdatasyncs++
		if res.Fdatasyncs%8 == 0 || batch >= 8 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
	}
	res.Elapsed = time.Since(t0)
	if s := res.Elapsed.Seconds(); s > 0 {
		res.RecsPerS = float64(res.Records) / s
		res.MBPerS = float64(res.Records) * float64(size) / s / 1e6
	}
	res.Sync = latStats(lat)
	return res, nil
}

// echoServerEnv, set to 1, makes this binary (or its test binary) run as
// the echo server of `bench rtt` instead of the CLI.
const echoServerEnv = "METAQ_BENCH_ECHO_SERVER"

// echoServerMain listens on a free 127.0.0.1 port, prints the address on
// stdout, echoes lines on one connection, and exits when it closes (or
// after a minute without one).
func echoServerMain() int {
	if err := runEchoServer(); err != nil {
		fmt.Fprintln(os.Stderr, "echo server:", err)
		return 1
	}
	return 0
}

func runEchoServer() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println(ln.Addr().String())
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil
		}
		if _, err := c.Write(line); err != nil {
			return nil
		}
	}
}
