package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestRunCmdCPU: the CPU time of a step counts the children its process
// waited for, as in a shell pipeline, where the shell itself does
// nothing but wait.
func TestRunCmdCPU(t *testing.T) {
	// A fixed count of shell iterations (a tenth of a second or more of
	// CPU here, whatever the load), in a subshell the outer shell waits for.
	loop := `(i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done); :`
	out, cpu, err := runCmdCPU(context.Background(), time.Minute, os.Environ(), "", "/bin/sh", "-c", loop)
	if err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	if cpu < 20*time.Millisecond {
		t.Errorf("got %v of CPU, want the subshell's loop counted (20ms or more)", cpu)
	}
	_, idle, err := runCmdCPU(context.Background(), time.Minute, os.Environ(), "", "/bin/sh", "-c", "sleep 0.2")
	if err != nil {
		t.Fatal(err)
	}
	if idle >= cpu {
		t.Errorf("a sleep took %v of CPU, the loop %v: want less", idle, cpu)
	}
}
