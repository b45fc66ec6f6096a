package load

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable writes the reports as a markdown table, one column per
// phase, followed by every violation.
func WriteTable(w io.Writer, reports []Report) {
	if len(reports) == 0 {
		fmt.Fprintln(w, "no phase ran")
		return
	}
	rows := []struct {
		name string
		cell func(r *Report) string
	}{
		{"readers", func(r *Report) string { return fmt.Sprint(r.Readers) }},
		{"time under load", func(r *Report) string { return r.Elapsed.Round(time.Second).String() }},
		{"reads (verified)", func(r *Report) string { return fmt.Sprint(r.Reads) }},
		{"reads/s: all / O_DIRECT", func(r *Report) string {
			return fmt.Sprintf("%.0f / %.0f", perSecond(float64(r.Reads), r.Elapsed), perSecond(float64(r.Direct.Reads), r.Elapsed))
		}},
		{"read MB/s", func(r *Report) string { return fmt.Sprintf("%.1f", perSecond(float64(r.Bytes)/1e6, r.Elapsed)) }},
		{"opens", func(r *Report) string { return fmt.Sprint(r.Opens) }},
		{"O_DIRECT read p50 / p99 / max", func(r *Report) string { return r.Direct.String() }},
		{"buffered read p50 / p99 / max", func(r *Report) string { return r.Buffered.String() }},
		{"errors (failed or wrong reads)", func(r *Report) string { return fmt.Sprint(r.Errors) }},
		{"fetched by tarmount", func(r *Report) string { return fmt.Sprintf("%.1f MB", float64(r.Fetched)/1e6) }},
		{"peak RSS (VmHWM) / budget", func(r *Report) string {
			if r.Budget == 0 {
				return fmt.Sprintf("%.1f MiB / not checked", mib(r.PeakHWM))
			}
			return fmt.Sprintf("%.1f MiB / %.0f MiB", mib(r.PeakHWM), mib(r.Budget))
		}},
		{"RSS idle / start / mid / end / rest", func(r *Report) string {
			return samples(r, func(s Sample) string { return fmt.Sprintf("%.0f", mib(s.RSS)) }) + " MiB"
		}},
		{"Go heap in use idle / start / mid / end / rest", func(r *Report) string {
			return samples(r, func(s Sample) string {
				if s.Heap < 0 {
					return "?"
				}
				return fmt.Sprintf("%.0f", mib(s.Heap))
			}) + " MiB"
		}},
		{"fds idle / start / mid / end / rest", func(r *Report) string {
			return samples(r, func(s Sample) string { return count(s.FDs) })
		}},
		{"of which sockets / pipes", func(r *Report) string {
			return samples(r, func(s Sample) string {
				if s.FDs < 0 {
					return "?"
				}
				return fmt.Sprintf("%d+%d", s.Sockets, s.Pipes)
			})
		}},
		{"goroutines idle / start / mid / end / rest", func(r *Report) string {
			return samples(r, func(s Sample) string { return count(s.Goroutines) })
		}},
		{"materialized", func(r *Report) string {
			if r.Phase != PhaseMaterialize {
				return "-"
			}
			s := fmt.Sprintf("%d of %d files", r.MatFiles, r.MatTotal)
			if r.MatDoneAfter > 0 {
				s += fmt.Sprintf(", complete after %v", r.MatDoneAfter.Round(time.Second))
			}
			return s
		}},
		{"result", func(r *Report) string {
			if r.Failed() {
				return fmt.Sprintf("FAIL (%d)", len(r.Violations))
			}
			return "ok"
		}},
	}
	head := []string{""}
	sep := []string{"---"}
	for _, r := range reports {
		head = append(head, r.Phase)
		sep = append(sep, "---")
	}
	fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(sep, "|"))
	for _, row := range rows {
		cells := []string{row.name}
		for i := range reports {
			cells = append(cells, row.cell(&reports[i]))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	for _, r := range reports {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "%s: FAIL: %s\n", r.Phase, v)
		}
	}
}

func (l Latency) String() string {
	return fmt.Sprintf("%v / %v / %v", roundDur(l.P50), roundDur(l.P99), roundDur(l.Max))
}

func samples(r *Report, f func(Sample) string) string {
	var out []string
	for _, s := range []Sample{r.Idle, r.Start, r.Mid, r.End, r.Rest} {
		out = append(out, f(s))
	}
	return strings.Join(out, " / ")
}

func count(n int) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func perSecond(x float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return x / d.Seconds()
}
