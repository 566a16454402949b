package worker_test

import (
	"context"
	"log"

	"github.com/leasehold/leasehold/worker"
)

// Connect to a coordinator that serves TLS and wants an API key, configured
// from the environment as the leasehold CLI is (LEASEHOLD_TLS_CA_FILE,
// LEASEHOLD_TLS_CERT_FILE, LEASEHOLD_TLS_KEY_FILE, LEASEHOLD_API_KEY).
func ExampleDial() {
	conn, err := worker.Dial("leasehold.example:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	w, err := worker.New(conn, worker.Config{Queues: []string{"emails"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Run(context.Background())
}

// The same in code: trust a private CA, present a client certificate
// (for --auth mtls), or send an API key.
func ExampleDialConfig() {
	conn, err := worker.Dial("leasehold.example:7400", worker.DialConfig{
		CAFile:   "/etc/leasehold/ca.crt",
		CertFile: "/etc/leasehold/client.crt",
		KeyFile:  "/etc/leasehold/client.key",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	_ = worker.NewClient(conn)
}
