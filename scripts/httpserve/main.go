// Command httpserve serves the files of one directory over HTTP on the
// loopback interface, with byte ranges, a strong ETag and the conditional
// headers, optionally shaped like object storage. Tests, the demo and the
// benchmarks use it as the remote end of tarmount.
//
//	go run ./scripts/httpserve -addr 127.0.0.1:0 -dir DIR [-latency 20ms] [-rate 80MB] [-v]
//
// The first line on standard output is "listening on http://127.0.0.1:PORT",
// for scripts to read the port from. GET /-/stats answers the request and
// byte counters as JSON; on SIGINT or SIGTERM the server logs them to
// standard error and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tarmount/tarmount/scripts/httpserve/shaped"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpserve:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only; port 0 picks a free one)")
	dir := flag.String("dir", "", "directory to serve (required)")
	latency := flag.Duration("latency", 0, "delay before the first byte of every response, e.g. 20ms")
	rateFlag := flag.String("rate", "", "per-connection bandwidth cap, e.g. 80MB (1e6 B/s units) or 10MiB; empty for none")
	verbose := flag.Bool("v", false, "log every request to standard error")
	flag.Parse()
	if *dir == "" || flag.NArg() != 0 {
		flag.Usage()
		return errors.New("usage: httpserve -dir DIR [-addr 127.0.0.1:0] [-latency D] [-rate R]")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fmt.Errorf("-dir %s: not a directory", *dir)
	}
	rate, err := shaped.ParseRate(*rateFlag)
	if err != nil {
		return err
	}
	if err := checkLoopback(*addr); err != nil {
		return err
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	h := shaped.NewHandler(*dir, shaped.Options{Latency: *latency, Rate: rate, Logger: log})
	defer h.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}

	// The first line on stdout is the contract with scripts.
	fmt.Printf("listening on http://%s\n", ln.Addr())
	log.Info("serving", "dir", *dir, "addr", ln.Addr().String(), "latency", *latency, "rate", rate)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	stats, _ := json.Marshal(h.Stats())
	log.Info("stopped", "stats", string(stats))
	return nil
}

// checkLoopback refuses to listen anywhere but a loopback address.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %s: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %s: only loopback addresses (127.0.0.1, ::1) are allowed", addr)
	}
	return nil
}
