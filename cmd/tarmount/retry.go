package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tarmount/tarmount/fetch"
)

// retryConfig holds the flags that bound reads of the source.
type retryConfig struct {
	readTimeout time.Duration
	retries     int
	minSpeed    int64 // bytes per second; 0 disables the stall watchdog
}

const defaultRetries = 7

// register adds --read-timeout, --retries and --min-speed to fs, with
// their defaults.
func (r *retryConfig) register(fs *flag.FlagSet) {
	r.readTimeout = fetch.DefaultReadTimeout
	r.retries = defaultRetries
	r.minSpeed = fetch.DefaultMinBytesPerSec
	fs.Func("read-timeout", fmt.Sprintf("give up a read of the source after this `duration`, retries included: the reading process gets EIO (default %v)", r.readTimeout),
		func(s string) error {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return fmt.Errorf("want a positive duration such as 30s or 2m, got %q", s)
			}
			r.readTimeout = d
			return nil
		})
	fs.Func("retries", fmt.Sprintf("`n` retries of a range request that failed transiently (5xx, throttling, cut connection, stall); 0 disables (default %d)", r.retries),
		func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("want a number of retries, 0 or more, got %q", s)
			}
			r.retries = n
			return nil
		})
	fs.Func("min-speed", fmt.Sprintf("`bytes` per second below which a transfer counts as stalled (after a 5 s grace) and is restarted where it stopped; 0 disables (default %d)", r.minSpeed),
		func(s string) error {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("want bytes per second, 0 or more, got %q", s)
			}
			r.minSpeed = n
			return nil
		})
}

// options turns the flags into fetch.RetryOptions.
func (r *retryConfig) options(log *slog.Logger) fetch.RetryOptions {
	o := fetch.RetryOptions{MaxAttempts: r.retries + 1, Deadline: r.readTimeout, MinSpeed: r.minSpeed, Logger: log}
	if r.minSpeed == 0 {
		o.MinSpeed = -1
	}
	return o
}

// openSource opens url and wraps it with retries, so that the block cache,
// the index pass and span reads all see a source whose reads are retried
// and bounded in time.
func openSource(ctx context.Context, url string, c *config, disk *fetch.DiskCache, log *slog.Logger) (fetch.Source, error) {
	return fetch.OpenWithRetry(ctx, url, fetch.Options{
		Logger:        log,
		Header:        c.headers.h,
		Region:        c.s3.region,
		EndpointURL:   c.s3.endpointURL,
		Profile:       c.s3.profile,
		NoSignRequest: c.s3.noSignRequest,
		Copies:        disk,
		Conns:         c.workers,
		HTTP1:         c.http1,
	}, c.retry.options(log))
}

// logRetries logs at Info what retries did during the life of src, if
// anything.
func logRetries(log *slog.Logger, src fetch.Source) {
	rs, ok := src.(interface{ RetryStats() fetch.RetryStats })
	if !ok {
		return
	}
	if st := rs.RetryStats(); st != (fetch.RetryStats{}) {
		log.Info("fetch retries", "src", src.String(), "retries", st.Retries, "resumes", st.Resumes,
			"stalls", st.Stalls, "timeouts", st.Timeouts)
	}
}
