package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/tarmount/tarmount/archive"
)

// registerRetry adds --read-timeout, --retries and --min-speed, the flags
// that bound reads of the source, to fs.
func registerRetry(fs *flag.FlagSet, ao *archive.Options) {
	ao.ReadTimeout, ao.Retries, ao.MinSpeed = archive.DefaultReadTimeout, archive.DefaultRetries, archive.DefaultMinSpeed
	fs.Func("read-timeout", fmt.Sprintf("give up a read of the source after this `duration`, retries included: the reading process gets EIO (default %v)", ao.ReadTimeout),
		func(s string) error {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return fmt.Errorf("want a positive duration such as 30s or 2m, got %q", s)
			}
			ao.ReadTimeout = d
			return nil
		})
	fs.Func("retries", fmt.Sprintf("`n` retries of a range request that failed transiently (5xx, throttling, cut connection, stall); 0 disables (default %d)", ao.Retries),
		func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("want a number of retries, 0 or more, got %q", s)
			}
			ao.Retries = n
			return nil
		})
	fs.Func("min-speed", fmt.Sprintf("`bytes` per second below which a transfer counts as stalled (after a 5 s grace) and is restarted where it stopped; 0 disables (default %d)", ao.MinSpeed),
		func(s string) error {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("want bytes per second, 0 or more, got %q", s)
			}
			ao.MinSpeed = n
			return nil
		})
}
