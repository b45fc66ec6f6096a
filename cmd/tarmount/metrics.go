package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/archive"
	tfs "github.com/tarmount/tarmount/fs"
)

// Prometheus metrics of a mount (--metrics-addr), served at /metrics.
// FUSE requests are counted and timed as they are answered; everything
// else is read from the counters that fetch, index and materialize keep
// anyway (one status snapshot per scrape), so nothing is counted twice.

// metrics holds the FUSE request metrics and the registry.
type metrics struct {
	reg       *prometheus.Registry
	ops       map[string]opMetrics // set once: one per tfs.Ops name
	opsTotal  *prometheus.CounterVec
	opSeconds *prometheus.HistogramVec
	opErrors  *prometheus.CounterVec
}

// opMetrics are the metrics of one op, looked up once so that observing
// a request neither hashes labels nor allocates.
type opMetrics struct {
	count   prometheus.Counter
	seconds prometheus.Observer
}

// opBuckets are the upper bounds of the request duration histogram: 10 µs
// (a cached lookup) to 2.6 s (a read that waited for a slow server).
var opBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)

func newMetrics(s *statusSource) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		opsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarmount_fuse_ops_total", Help: "FUSE requests answered, by op.",
		}, []string{"op"}),
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tarmount_fuse_op_duration_seconds", Help: "Time spent answering FUSE requests, by op.", Buckets: opBuckets,
		}, []string{"op"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarmount_fuse_op_errors_total", Help: "FUSE requests answered with an error, by op and errno (lookup ENOENT: a missing name).",
		}, []string{"op", "errno"}),
		ops: make(map[string]opMetrics, len(tfs.Ops)),
	}
	for _, op := range tfs.Ops {
		m.ops[op] = opMetrics{m.opsTotal.WithLabelValues(op), m.opSeconds.WithLabelValues(op)}
	}
	m.reg.MustRegister(m.opsTotal, m.opSeconds, m.opErrors, statusCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe is the mount's tfs.ObserveFunc.
func (m *metrics) observe(op string, d time.Duration, errno syscall.Errno) {
	om, ok := m.ops[op]
	if !ok {
		om = opMetrics{m.opsTotal.WithLabelValues(op), m.opSeconds.WithLabelValues(op)}
	}
	om.count.Inc()
	om.seconds.Observe(d.Seconds())
	if errno != 0 {
		m.opErrors.WithLabelValues(op, errnoName(errno)).Inc()
	}
}

// errnoName is "ENOENT" for ENOENT, or the number for an errno without a
// name.
func errnoName(errno syscall.Errno) string {
	if name := unix.ErrnoName(errno); name != "" {
		return name
	}
	return fmt.Sprint(uintptr(errno))
}

// statusMetric is a metric read from a status snapshot.
type statusMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*archive.Status) float64
}

func counter(name, help string, labels prometheus.Labels, v func(*archive.Status) int64) statusMetric {
	return statusMetric{prometheus.NewDesc(name, help, nil, labels), prometheus.CounterValue, func(s *archive.Status) float64 { return float64(v(s)) }}
}

func gauge(name, help string, labels prometheus.Labels, v func(*archive.Status) int64) statusMetric {
	return statusMetric{prometheus.NewDesc(name, help, nil, labels), prometheus.GaugeValue, func(s *archive.Status) float64 { return float64(v(s)) }}
}

var (
	blocksCache = prometheus.Labels{"cache": "blocks"}
	spansCache  = prometheus.Labels{"cache": "spans"}
)

// statusMetrics are the metrics of every mount.
var statusMetrics = []statusMetric{
	gauge("tarmount_archive_size_bytes", "Size of the archive as stored.", nil, func(s *archive.Status) int64 { return s.Archive.Size }),
	gauge("tarmount_index_entries", "Entries (inodes) in the index.", nil, func(s *archive.Status) int64 { return int64(s.Index.Entries) }),
	gauge("tarmount_index_checkpoints", "Checkpoints (spans) in the index.", nil, func(s *archive.Status) int64 { return int64(s.Index.Checkpoints) }),
	gauge("tarmount_uptime_seconds", "Seconds since the server started.", nil, func(s *archive.Status) int64 { return int64(s.UptimeSeconds) }),
	counter("tarmount_fetch_requests_total", "Range requests to the archive's source, materialization's included.", nil, func(s *archive.Status) int64 { return s.Fetch.Requests }),
	counter("tarmount_fetch_bytes_total", "Bytes fetched from the archive's source, materialization's included.", nil, func(s *archive.Status) int64 { return s.Fetch.Bytes }),
	gauge("tarmount_fetch_in_flight_bytes", "Bytes asked of the source by the mount's fetches not yet answered.", nil, func(s *archive.Status) int64 { return s.Fetch.InFlightBytes }),
	counter("tarmount_fetch_retries_total", "Attempts after the first of a range request.", nil, func(s *archive.Status) int64 { return s.Fetch.Retries }),
	counter("tarmount_fetch_stalls_total", "Transfers restarted by the stall watchdog (--min-speed).", nil, func(s *archive.Status) int64 { return s.Fetch.Stalls }),
	counter("tarmount_fetch_timeouts_total", "Reads of the source that failed after --read-timeout.", nil, func(s *archive.Status) int64 { return s.Fetch.Timeouts }),
	counter("tarmount_cache_memory_hits_total", "Lookups served from memory, by cache.", blocksCache, func(s *archive.Status) int64 { return s.Cache.BlockHits }),
	counter("tarmount_cache_memory_hits_total", "Lookups served from memory, by cache.", spansCache, func(s *archive.Status) int64 { return s.Cache.SpanHits }),
	counter("tarmount_cache_memory_misses_total", "Lookups that waited for a fetch or a decode, by cache.", blocksCache, func(s *archive.Status) int64 { return s.Cache.BlockMisses }),
	counter("tarmount_cache_memory_misses_total", "Lookups that waited for a fetch or a decode, by cache.", spansCache, func(s *archive.Status) int64 { return s.Cache.SpanMisses }),
	gauge("tarmount_cache_memory_bytes", "Bytes of fetched blocks and decoded spans held in memory.", nil, func(s *archive.Status) int64 { return s.Cache.MemoryBytes }),
	gauge("tarmount_cache_memory_limit_bytes", "Bound of the memory caches (--cache-mem).", nil, func(s *archive.Status) int64 { return s.Cache.MemoryLimitBytes }),
	counter("tarmount_cache_disk_hits_total", "Blocks and ranges read from the disk cache instead of the source.", nil, func(s *archive.Status) int64 { return s.Cache.DiskHits }),
	counter("tarmount_cache_disk_read_bytes_total", "Bytes read from the disk cache instead of the source.", nil, func(s *archive.Status) int64 { return s.Cache.DiskReadBytes }),
	gauge("tarmount_cache_disk_used_bytes", "Bytes used by the disk cache directory (shared by mounts; an estimate).", nil, func(s *archive.Status) int64 { return s.Cache.DiskUsedBytes }),
	counter("tarmount_span_decodes_total", "Spans decoded from checkpoints and verified, materialization's included.", nil, func(s *archive.Status) int64 { return s.Cache.SpanDecodes }),
}

// materializeMetrics are the metrics of a mount with --materialize.
var materializeMetrics = []statusMetric{
	counter("tarmount_materialize_files_written_total", "Files written to DIR by this run.", nil, func(s *archive.Status) int64 { return s.Materialize.Files }),
	counter("tarmount_materialize_bytes_written_total", "Bytes of file data written to DIR by this run.", nil, func(s *archive.Status) int64 { return s.Materialize.Bytes }),
	gauge("tarmount_materialize_target_files", "Files this run writes; while the index pass stages them, those seen so far (tarmount_materialize_totals_final 0).", nil, func(s *archive.Status) int64 { return s.Materialize.FilesTotal }),
	gauge("tarmount_materialize_target_bytes", "Bytes of file data this run writes; while the index pass stages them, those seen so far.", nil, func(s *archive.Status) int64 { return s.Materialize.BytesTotal }),
	gauge("tarmount_materialize_totals_final", "1 once the target files and bytes are what this run writes, 0 while they grow.", nil, func(s *archive.Status) int64 { return boolValue(s.Materialize.TotalsFinal) }),
	gauge("tarmount_materialize_complete", "1 once DIR is complete, else 0.", nil, func(s *archive.Status) int64 { return boolValue(s.Materialize.Complete) }),
}

// passMetrics are the metrics of a mount that ran the first pass: its
// progress while it runs, its final counts after.
var passMetrics = []statusMetric{
	counter("tarmount_index_pass_read_bytes_total", "Bytes of the archive as stored read by the index pass.", nil, func(s *archive.Status) int64 { return s.Index.Pass.BytesRead }),
	gauge("tarmount_index_pass_target_bytes", "Bytes of the archive as stored that the index pass reads.", nil, func(s *archive.Status) int64 { return s.Index.Pass.BytesTotal }),
	counter("tarmount_index_pass_entries_total", "Archive members read by the index pass.", nil, func(s *archive.Status) int64 { return s.Index.Pass.Entries }),
	gauge("tarmount_index_pass_running", "1 while the index pass runs, else 0.", nil, func(s *archive.Status) int64 { return boolValue(s.Index.Pass.Running) }),
}

func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

var infoDesc = prometheus.NewDesc("tarmount_info", "Always 1: the mount's archive, codec and where its index came from.",
	[]string{"source", "codec", "index"}, nil)

// statusCollector reads the metrics of statusMetrics from one status
// snapshot per scrape.
type statusCollector struct{ s *statusSource }

func (c statusCollector) metrics() []statusMetric {
	if !c.s.materialize {
		return statusMetrics
	}
	return append(statusMetrics[:len(statusMetrics):len(statusMetrics)], materializeMetrics...)
}

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- infoDesc
	for _, m := range append(c.metrics(), passMetrics...) {
		ch <- m.desc
	}
}

// Collect sends the metrics of one status snapshot; passMetrics only
// when a pass ran.
func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.status()
	ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, st.Source, st.Archive.Codec, st.Index.Source)
	ms := c.metrics()
	if st.Index.Pass != nil {
		ms = append(ms[:len(ms):len(ms)], passMetrics...)
	}
	for _, m := range ms {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st))
	}
}

// serveMetrics serves reg at http://addr/metrics until the returned stop
// is called, and logs the address it listens on (port 0 picks a free
// one).
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
