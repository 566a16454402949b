package main

// Version is the binary's version, reported by "leasehold version" and by
// WorkerService.GetVersion.
const Version = "0.1.0"
