package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// semverRE is semver.org's grammar with Go's leading "v"; git describe's
// v1.2.3-4-gabcdef is a valid pre-release.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

func TestUnstampedVersionIsSemantic(t *testing.T) {
	t.Parallel()
	if !semverRE.MatchString(VersionDefault) {
		t.Fatalf("VersionDefault %q is not a semantic version", VersionDefault)
	}
	if r := runCLI(t, "version"); r.code != exitOK || r.stdout != "leasehold "+Version+"\n" {
		t.Fatalf("leasehold version = %d %q", r.code, r.stdout)
	}
}

// A release build stamps the tag with -ldflags -X, as make build does; the
// binary then reports it.
func TestVersionIsStampedAtBuildTime(t *testing.T) {
	t.Parallel()
	const tag = "v1.2.3-rc.1"
	bin := filepath.Join(t.TempDir(), "leasehold")
	build := exec.CommandContext(context.Background(), "go", "build", "-ldflags", "-X main.Version="+tag, "-o", bin, ".")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(context.Background(), bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "leasehold "+tag {
		t.Fatalf("stamped binary says %q, want %q", got, "leasehold "+tag)
	}
}
