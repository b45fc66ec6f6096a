// Command httpserve serves the files of one directory over HTTP on the
// loopback interface, with byte ranges, a strong ETag and the conditional
// headers, optionally shaped like object storage. Tests, the demo and the
// benchmarks use it as the remote end of tarmount.
//
//	go run ./scripts/httpserve -addr 127.0.0.1:0 -dir DIR [-latency 20ms] [-rate 80MB] [-v]
//	go run ./scripts/httpserve -dir DIR -tls CERT.pem [-conn-rate 80MB] [-handshake 40ms]
//
// The first line on standard output is "listening on http://127.0.0.1:PORT"
// (https with -tls), for scripts to read the port from. With -tls it serves
// HTTP/2 and HTTP/1.1 over TLS with a new self-signed certificate for
// 127.0.0.1, written to CERT.pem for clients to trust (SSL_CERT_FILE).
// -conn-rate and -handshake shape each connection as a whole, which is
// what matters over HTTP/2, where requests share a connection. GET /-/stats answers the request and
// byte counters as JSON; on SIGINT or SIGTERM the server logs them to
// standard error and exits 0.
package main

import (
	"context"
	"crypto/tls"
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

	"github.com/tarmount/tarmount/internal/testutil/shaped"
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
	connRateFlag := flag.String("conn-rate", "", "bandwidth cap of each connection as a whole (shared by its HTTP/2 requests); empty for none")
	handshake := flag.Duration("handshake", 0, "delay before the first read of each new connection, like TCP and TLS set-up far away")
	certOut := flag.String("tls", "", "serve HTTPS (HTTP/2 and HTTP/1.1) with a new self-signed certificate written to this PEM file")
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
	connRate, err := shaped.ParseRate(*connRateFlag)
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
	ln = shaped.Listen(ln, shaped.ConnOptions{Rate: connRate, Handshake: *handshake})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if *certOut != "" {
		cert, err := selfSigned(*certOut)
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		ln = tls.NewListener(ln, srv.TLSConfig)
		scheme = "https"
	}

	// The first line on stdout is the contract with scripts.
	fmt.Printf("listening on %s://%s\n", scheme, ln.Addr())
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

// selfSigned makes a certificate for 127.0.0.1, ::1 and localhost, valid
// for a day, and writes it as PEM to path.
func selfSigned(path string) (tls.Certificate, error) {
	cert, certPEM, err := shaped.SelfSigned("127.0.0.1", "::1", "localhost")
	if err != nil {
		return tls.Certificate{}, err
	}
	return cert, os.WriteFile(path, certPEM, 0o644)
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
