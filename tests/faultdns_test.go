package tests

import (
	be "encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil"
)

// dnsServer is a DNS server for one test on a loopback address of its
// own, port 53: it answers A queries for names under .test with
// 127.0.0.1 (AAAA with no address), and NXDOMAIN for other names (such as
// .invalid) and for every name while it fails.
type dnsServer struct {
	addr    string // 127.x.y.z
	conn    *net.UDPConn
	fail    atomic.Bool
	queries atomic.Int64
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	var conn *net.UDPConn
	var err error
	for range 5 {
		ip := net.IPv4(127, byte(1+rand.IntN(250)), byte(rand.IntN(256)), byte(1+rand.IntN(250)))
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: 53})
		if err == nil {
			break
		}
	}
	if err != nil {
		testutil.Missing(t, "no loopback address for a DNS server: %v", err)
	}
	d := &dnsServer{addr: conn.LocalAddr().(*net.UDPAddr).IP.String(), conn: conn}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if resp := d.answer(buf[:n]); resp != nil {
				conn.WriteToUDP(resp, from)
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return d
}

// answer builds the reply to query q, or nil for a malformed one.
//
//	header (12 bytes): id, flags, qdcount, ancount, nscount, arcount
//	question: name (labels), type (2), class (2)
//	answer:   pointer to the name (0xc00c), type A, class IN, ttl 0, len 4, address
func (d *dnsServer) answer(q []byte) []byte {
	if len(q) < 12 || be.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	d.queries.Add(1)
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l > 63 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, strings.ToLower(string(q[i+1:i+1+l])))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	end := i + 5
	qtype := be.BigEndian.Uint16(q[i+1:])
	flags := uint16(0x8000|0x0400|0x0080) | be.BigEndian.Uint16(q[2:])&0x0100 // QR, AA, RA; RD as asked
	known := len(labels) > 0 && labels[len(labels)-1] == "test"
	an := uint16(0)
	switch {
	case d.fail.Load() || !known:
		flags |= 3 // NXDOMAIN
	case qtype == 1: // A
		an = 1
	}
	resp := append([]byte(nil), q[0], q[1])
	resp = be.BigEndian.AppendUint16(resp, flags)
	resp = append(resp, 0, 1, byte(an>>8), byte(an), 0, 0, 0, 0)
	resp = append(resp, q[12:end]...)
	if an == 1 {
		resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1)
	}
	return resp
}

// dnsWrap returns a command prefix that runs a program in a mount
// namespace of its own whose /etc/resolv.conf names d, so that tarmount
// resolves through d while the rest of the machine does not notice. It
// skips t where mount namespaces cannot be had.
func dnsWrap(t *testing.T, d *dnsServer) []string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver "+d.addr+"\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wrap := []string{"unshare", "-m", "--propagation", "unchanged", "--",
		"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, conf}
	probe := exec.Command(wrap[0], append(wrap[1:], "getent", "hosts", "probe.tarmount.test")...)
	if out, err := probe.CombinedOutput(); err != nil || !strings.Contains(string(out), "127.0.0.1") {
		testutil.Missing(t, "cannot run tarmount with a DNS server of its own (unshare, mount --bind): %v: %s", err, out)
	}
	return wrap
}

// TestFaultsDNS: a host name that does not resolve. At open (a name under
// .invalid), a mount and an extraction fail at once, saying so. Once the
// archive is open, the name stops resolving (NXDOMAIN for everything, and
// the server drops its connections so that new ones must be made): the
// index pass rides it out with a --read-timeout longer than the outage;
// reads fail with EIO within a short one and succeed once names resolve
// again; an extraction fails and a second run completes it; a
// materialization stops and resumes in the same mount.
//
// tarmount runs in a mount namespace whose /etc/resolv.conf names a DNS
// server of the test's own.
func TestFaultsDNS(t *testing.T) {
	a := newFaultArchive(t)
	const short = 2 * time.Second
	away := 4 * time.Second
	long := away + 15*time.Second

	t.Run("open", func(t *testing.T) {
		t.Parallel()
		wrap := dnsWrap(t, startDNS(t))
		url := "http://archive.invalid/a.tar.gz"
		for _, cmd := range [][]string{
			{binary, url, bindTarget(t, wrap), "--mount-name", testMountName, "--cache-dir", t.TempDir()},
			{binary, "extract", url, filepath.Join(t.TempDir(), "out"), "--cache-dir", t.TempDir()},
		} {
			start := time.Now()
			argv := append(append([]string(nil), wrap...), cmd...)
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			elapsed := time.Since(start)
			last := lastLines(string(out), 1)
			if err == nil || !strings.HasPrefix(last, "tarmount: open "+url) || !strings.Contains(last, "no such host") {
				t.Errorf("%s: got %v, last line %q; want a tarmount: open error naming \"no such host\"", cmd[1], err, last)
			}
			if elapsed > faultSlack {
				t.Errorf("%s: failed after %v: a name that does not exist is not retried", cmd[1], elapsed)
			}
		}
	})

	for _, ph := range awayPhases(long, short, "no such host") {
		t.Run(ph.name, func(t *testing.T) {
			t.Parallel()
			d := startDNS(t)
			wrap := dnsWrap(t, d)
			s := newFaultSite(t, a, siteOptions{latency: 20 * time.Millisecond, connRate: 256 << 10, host: "archive.tarmount.test"})
			before := d.queries.Load()
			f := fault{
				start: func(t *testing.T) {
					d.fail.Store(true)
					s.srv.DropConns() // new connections must resolve the name
				},
				stop: func(t *testing.T) { d.fail.Store(false) },
				at:   a.size / 4,
				hold: away,
				wrap: wrap,
			}
			ph.run(t, s, f)
			if d.queries.Load() == before {
				t.Error("no DNS query reached the test's server")
			}
		})
	}
}
