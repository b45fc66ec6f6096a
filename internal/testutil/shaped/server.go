package shaped

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ServerOptions configure a Server. The zero value serves plain HTTP.
type ServerOptions struct {
	// Certificate, if set, makes the server speak TLS (HTTP/2 and
	// HTTP/1.1) with it; SetCertificate changes it.
	Certificate *tls.Certificate
	// Conn shapes every connection (see Listen).
	Conn ConnOptions
}

// Server serves a handler on a free port of 127.0.0.1 like a remote
// server that misbehaves at the transport level: it can go away (Down:
// connections are refused) and come back on the same address (Up), drop
// every open connection, and present another TLS certificate to new
// connections. It is safe for concurrent use.
type Server struct {
	URL  string // http://127.0.0.1:PORT, or https://
	Addr string // 127.0.0.1:PORT

	// set once
	srv  *http.Server
	opts ServerOptions
	cert atomic.Pointer[tls.Certificate]

	mu sync.Mutex
	// guarded by mu
	ln      net.Listener  // nil while down
	serving chan struct{} // closed when the Serve of ln returned
	conns   map[net.Conn]struct{}
	closed  bool
}

// StartServer serves h on a free port of 127.0.0.1.
func StartServer(h http.Handler, opts ServerOptions) (*Server, error) {
	s := &Server{opts: opts, conns: map[net.Conn]struct{}{}}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: s.connState,
		// Failed TLS handshakes are what TLS tests make: not worth a line.
		ErrorLog: log.New(io.Discard, "", 0)}
	scheme := "http"
	if opts.Certificate != nil {
		s.cert.Store(opts.Certificate)
		s.srv.TLSConfig = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		}}
		scheme = "https"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.Addr = ln.Addr().String()
	s.URL = scheme + "://" + s.Addr
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serveLocked(ln)
	return s, nil
}

func (s *Server) serveLocked(ln net.Listener) {
	s.ln = Listen(ln, s.opts.Conn)
	done := make(chan struct{})
	s.serving = done
	go func(ln net.Listener) {
		defer close(done)
		if s.opts.Certificate != nil {
			s.srv.ServeTLS(ln, "", "")
		} else {
			s.srv.Serve(ln)
		}
	}(s.ln)
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// Down stops listening and closes every connection: until Up, clients
// get "connection refused".
func (s *Server) Down() {
	s.mu.Lock()
	ln, serving := s.ln, s.serving
	s.ln = nil
	s.mu.Unlock()
	if ln == nil {
		return
	}
	ln.Close()
	<-serving // every accepted connection is in conns now
	s.DropConns()
}

// Up listens again on the same address.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("shaped: server closed")
	case s.ln != nil:
		return nil
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("shaped: listen again on %s: %w", s.Addr, err)
	}
	s.serveLocked(ln)
	return nil
}

// DropConns closes every open connection, idle or busy; the server goes on
// listening.
func (s *Server) DropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
		delete(s.conns, c)
	}
}

// SetCertificate makes new TLS connections get cert; open connections keep
// theirs (DropConns ends them).
func (s *Server) SetCertificate(cert *tls.Certificate) { s.cert.Store(cert) }

// Close stops the server for good and waits for its handlers (release hung
// ones first: Faults.Release). It is idempotent.
func (s *Server) Close() {
	s.Down()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.srv.Close()
}

// SelfSigned makes a self-signed certificate, valid for a day, for names:
// IP addresses or DNS names. It returns the certificate and its PEM, for
// clients to trust (SSL_CERT_FILE).
func SelfSigned(names ...string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "httpserve"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}
