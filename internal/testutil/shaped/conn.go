package shaped

import (
	"context"
	"net"
	"sync"
	"time"
)

// ConnOptions shape every connection of a Listener as a whole, which is
// what a distant server looks like to a protocol that carries many
// requests on one connection (HTTP/2): Options.Rate caps each response,
// ConnOptions.Rate caps the connection they share.
type ConnOptions struct {
	// Rate caps the bytes per second written on each connection; zero
	// means no cap.
	Rate int64
	// Handshake is slept before the first read of a new connection, like
	// the round trips that setting up TCP and TLS take to a distant
	// server.
	Handshake time.Duration
}

// Listen returns l with its accepted connections shaped by o.
func Listen(l net.Listener, o ConnOptions) net.Listener {
	return &listener{Listener: l, opts: o}
}

type listener struct {
	net.Listener
	opts ConnOptions
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &conn{Conn: c, wait: l.opts.Handshake, rate: bucket{rate: l.opts.Rate}}
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	return sc, nil
}

type conn struct {
	net.Conn
	ctx    context.Context // done at Close, to end a shaped write
	cancel context.CancelFunc

	readOnce sync.Once
	wait     time.Duration

	wmu  sync.Mutex
	rate bucket // guarded by wmu
}

func (c *conn) Read(p []byte) (int, error) {
	c.readOnce.Do(func() {
		if c.wait > 0 {
			t := time.NewTimer(c.wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-c.ctx.Done():
			}
		}
	})
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.rate.write(c.ctx, p, c.Conn.Write)
}

func (c *conn) Close() error {
	c.cancel()
	return c.Conn.Close()
}
