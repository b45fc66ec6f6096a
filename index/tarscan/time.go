package tarscan

import (
	"cmp"
	"math"
	"time"
)

// Time is a time as a tar archive records it: whole seconds since the
// Unix epoch and the nanoseconds past them. Seconds take the whole int64
// range, because GNU base-256 fields and pax records reach far past 2262,
// where nanoseconds in an int64 end (ext4 keeps times up to 2446, and GNU
// tar sets them). The zero Time is the epoch.
type Time struct {
	Sec int64
	// Nsec is in [0, 999999999].
	Nsec int32
}

// Unix returns the Time sec seconds and nsec nanoseconds after the epoch;
// nsec may be outside [0, 1e9) and is carried into the seconds.
func Unix(sec, nsec int64) Time {
	if nsec < 0 || nsec >= nanosPerSecond {
		sec += nsec / nanosPerSecond
		nsec %= nanosPerSecond
		if nsec < 0 {
			sec, nsec = sec-1, nsec+nanosPerSecond
		}
	}
	return Time{Sec: sec, Nsec: int32(nsec)}
}

// FromTime returns t as a Time.
func FromTime(t time.Time) Time { return Time{Sec: t.Unix(), Nsec: int32(t.Nanosecond())} }

// IsZero reports whether t is the epoch, which the index uses for a time
// the archive does not record.
func (t Time) IsZero() bool { return t == Time{} }

// Std returns t as a time.Time in UTC.
func (t Time) Std() time.Time { return time.Unix(t.Sec, int64(t.Nsec)).UTC() }

// UnixNano returns t in nanoseconds since the epoch, and false when that
// does not fit an int64 (before 1678 or after 2262).
func (t Time) UnixNano() (int64, bool) {
	if t.Sec > (math.MaxInt64-nanosPerSecond)/nanosPerSecond || t.Sec < math.MinInt64/nanosPerSecond+1 {
		return 0, false
	}
	return t.Sec*nanosPerSecond + int64(t.Nsec), true
}

// Compare returns -1, 0 or +1 as t is before, equal to or after u.
func (t Time) Compare(u Time) int {
	if c := cmp.Compare(t.Sec, u.Sec); c != 0 {
		return c
	}
	return cmp.Compare(t.Nsec, u.Nsec)
}
