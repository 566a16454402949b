package coordinator

// Console delegation under AuthMTLS: the web console calls the API as the
// browser's client certificate, whose private key it never holds. It
// forwards the certificate (verified by its own TLS listener) with a proof
// that only a holder of the console session key can make, binding the
// certificate and the time; the coordinator re-verifies the certificate
// against its own client CAs and maps it to a principal exactly as for a
// direct connection.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/store"
)

// Metadata of a delegated call.
const (
	// ConsoleCertHeader carries the browser's certificate chain as the
	// console's TLS listener verified it: the DER certificates, leaf
	// first, concatenated, in standard base64.
	ConsoleCertHeader = "leasehold-console-cert"
	// ConsoleCertProofHeader is "<unix seconds>:<hex HMAC-SHA256 of
	// ConsoleCertProofMessage under ConsoleSessionKey>".
	ConsoleCertProofHeader = "leasehold-console-cert-proof"
)

// ConsoleCertMaxBytes bounds the forwarded chain (DER); its base64 must
// also fit the call's header limit (MaxHeaderListBytes, 16 KiB).
const ConsoleCertMaxBytes = 8 << 10

// consoleCertsMax bounds the certificates in a forwarded chain.
const consoleCertsMax = 4

var errBadDelegation = statusError(codes.Unauthenticated, ReasonUnauthenticated,
	"invalid forwarded client certificate: only the web console may forward one, with a fresh proof")

// ConsoleCertProofMessage is what a delegation proof signs: the time and
// the SHA-256 of the forwarded DER bytes. Its first line differs from
// ConsoleProofMessage's, so neither proof passes for the other.
func ConsoleCertProofMessage(unix int64, der []byte) string {
	sum := sha256.Sum256(der)
	return "leasehold console certificate\n" + strconv.FormatInt(unix, 10) + "\n" + hex.EncodeToString(sum[:])
}

// delegated reports whether the call forwards a certificate.
func delegated(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(ConsoleCertHeader)) > 0 || len(md.Get(ConsoleCertProofHeader)) > 0
}

// fromCertificateOrDelegation is the principal of an AuthMTLS call: the
// forwarded certificate's when the call forwards one (and then only with
// a valid proof, whatever certificate the connection itself presented),
// otherwise the connection's.
func (a *authenticator) fromCertificateOrDelegation(ctx context.Context) (*store.Principal, error) {
	if !delegated(ctx) {
		return a.fromCertificate(ctx)
	}
	leaf, err := a.delegatedLeaf(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	return a.principalOfCert(ctx, leaf)
}

// delegatedLeaf checks the forwarded chain and its proof at now and
// returns the leaf, verified against the coordinator's client CAs.
func (a *authenticator) delegatedLeaf(ctx context.Context, now time.Time) (*x509.Certificate, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	certs, proofs := md.Get(ConsoleCertHeader), md.Get(ConsoleCertProofHeader)
	if len(certs) != 1 || len(proofs) != 1 || len(certs[0]) > base64.StdEncoding.EncodedLen(ConsoleCertMaxBytes) {
		return nil, errBadDelegation
	}
	der, err := base64.StdEncoding.DecodeString(certs[0])
	if err != nil || len(der) == 0 {
		return nil, errBadDelegation
	}
	if !certProofOK(proofs[0], der, a.consoleKey, now) {
		return nil, errBadDelegation
	}
	chain, err := x509.ParseCertificates(der)
	if err != nil || len(chain) == 0 || len(chain) > consoleCertsMax {
		return nil, errBadDelegation
	}
	roots := a.clientCAs()
	if roots == nil {
		return nil, errBadDelegation
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// The same checks as the TLS handshake's for a direct client
	// certificate: the chain, the validity period, client-auth usage.
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, errBadDelegation
	}
	return chain[0], nil
}

// certProofOK checks proof ("<unix>:<hex HMAC>") for der under key at now.
func certProofOK(proof string, der, key []byte, now time.Time) bool {
	return proofOK(proof, key, now, func(unix int64) string { return ConsoleCertProofMessage(unix, der) })
}

// clientCAs is the pool the TLS listener verifies client certificates
// against now: asked of GetConfigForClient when the config reloads its
// files, so a renewed CA file counts here too.
func (a *authenticator) clientCAs() *x509.CertPool {
	if a.tls == nil {
		return nil
	}
	if a.tls.GetConfigForClient != nil {
		if c, err := a.tls.GetConfigForClient(&tls.ClientHelloInfo{}); err == nil && c != nil && c.ClientCAs != nil {
			return c.ClientCAs
		}
	}
	return a.tls.ClientCAs
}
