package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoInstallsOnlyWhatItNeeds: the README's first command,
// scripts/demo.sh, installs what the demo uses and does not build versitygw
// (the S3 server of the tests, minutes on a fresh machine), while the tests'
// set still does. The demo runs for real up to its build: scripts/deps.sh
// prints its steps instead of taking them (TARMOUNT_DEPS_DRY_RUN=1), and a
// fake go, first in PATH, logs every call and fails the build, which ends
// the demo there. The cache directory is empty, so scripts/versitygw.sh,
// reached by any path, would call go install.
func TestDemoInstallsOnlyWhatItNeeds(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	goLog := filepath.Join(tmp, "go.log")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeGo := "#!/bin/sh\necho \"go $*\" >>\"$FAKE_GO_LOG\"\ncase \"$1\" in build) exit 1 ;; esac\nexit 0\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func() []string {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "TARMOUNT_") {
				env = append(env, kv)
			}
		}
		return append(env,
			"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"FAKE_GO_LOG="+goLog,
			"TARMOUNT_DEPS_DRY_RUN=1",
			"TMPDIR="+tmp,
			"HOME="+tmp,
			"XDG_CACHE_HOME="+filepath.Join(tmp, "cache"),
		)
	}

	run := func(script string, args ...string) string {
		cmd := exec.Command(bash, append([]string{filepath.Join(root, script)}, args...)...)
		cmd.Env = env()
		out, _ := cmd.CombinedOutput()
		return string(out)
	}

	demo := run("scripts/demo.sh")
	logged, _ := os.ReadFile(goLog)
	t.Logf("scripts/demo.sh:\n%s\nthe fake go's calls:\n%s", demo, logged)
	if !strings.Contains(demo, "go mod download") {
		t.Errorf("the demo's install step did not reach go mod download")
	}
	if !strings.Contains(demo, "fuse3") {
		t.Errorf("the demo's install step does not install fuse3")
	}
	if !strings.Contains(string(logged), "go build") {
		t.Errorf("the demo did not reach its build: got go calls %q", logged)
	}
	if strings.Contains(demo, "versitygw") || strings.Contains(string(logged), "versitygw") {
		t.Errorf("scripts/demo.sh builds versitygw, which the demo never uses")
	}

	// The tests' set, which scripts/test.sh installs, still builds it.
	tests := run("scripts/deps.sh")
	if !strings.Contains(tests, "bash scripts/versitygw.sh") {
		t.Errorf("scripts/deps.sh (the tests' set) no longer builds versitygw: got\n%s", tests)
	}
	testSh, err := os.ReadFile(filepath.Join(root, "scripts", "test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(testSh), "\nbash scripts/deps.sh\n") {
		t.Errorf("scripts/test.sh does not install the tests' set (bash scripts/deps.sh)")
	}
}
