package main

// Version is the binary's semantic version, reported by "leasehold version",
// by WorkerService.GetVersion and as the OpenTelemetry service.version. A
// release build sets it from the git tag:
//
//	go build -ldflags "-X main.Version=$(git describe --tags --match 'v[0-9]*')" ./cmd/leasehold
//
// (make build and deploy/rootfs.sh do). Any other build reports
// VersionDefault.
var Version = VersionDefault

// VersionDefault is the version of a build that was not stamped: the next
// release, as a pre-release.
const VersionDefault = "v0.1.0-dev"
