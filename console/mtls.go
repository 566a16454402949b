package console

// The console under --auth mtls: the browser's client certificate, as the
// server the console is mounted in verified it, is the identity. The
// console cannot present it to the coordinator (it does not hold the
// private key), so each call forwards the chain with a proof under the
// session key binding the chain and the time; the coordinator re-verifies
// the chain against its own client CAs (docs/security.md).

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
)

// The coordinator's delegation metadata (coordinator.ConsoleCertHeader,
// coordinator.ConsoleCertProofHeader).
const (
	consoleCertHeader      = "leasehold-console-cert"
	consoleCertProofHeader = "leasehold-console-cert-proof"
)

// clientChain is the request's verified client certificate chain, leaf
// first, without its root (the coordinator holds the roots): the DER
// certificates concatenated. Nil when the request has no verified
// certificate.
func clientChain(r *http.Request) []byte {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	chain := r.TLS.VerifiedChains[0]
	if len(chain) > 1 {
		chain = chain[:len(chain)-1]
	}
	var der []byte
	for _, c := range chain {
		der = append(der, c.Raw...)
	}
	return der
}

// certID names a chain in the session cookie: its SHA-256.
func certID(chain []byte) string {
	if chain == nil {
		return ""
	}
	sum := sha256.Sum256(chain)
	return hex.EncodeToString(sum[:])
}

// asCaller returns ctx whose calls carry the request's credential: the
// session's API key, or with AuthMTLS the forwarded chain and its proof.
func (c *console) asCaller(ctx context.Context, s session, chain []byte) context.Context {
	if c.cfg.Auth != AuthMTLS {
		return asPrincipal(ctx, s.Key)
	}
	unix := time.Now().Unix()
	sum := sha256.Sum256(chain)
	m := hmac.New(sha256.New, c.cfg.SessionKey)
	m.Write([]byte("leasehold console certificate\n" + strconv.FormatInt(unix, 10) + "\n" + hex.EncodeToString(sum[:])))
	return metadata.AppendToOutgoingContext(ctx,
		consoleCertHeader, base64.StdEncoding.EncodeToString(chain),
		consoleCertProofHeader, strconv.FormatInt(unix, 10)+":"+hex.EncodeToString(m.Sum(nil)))
}

// refuseWithoutCert answers a request that brought no verified client
// certificate: there is no sign-in form to fall back to.
func (c *console) refuseWithoutCert(w http.ResponseWriter, r *http.Request) {
	c.log.InfoContext(r.Context(), "console request refused: no verified client certificate",
		slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
	msg := "Refused: this console (--auth mtls) needs a client certificate issued by the coordinator's client CA. " +
		"Install one in your browser and choose it when asked; there is no sign-in form and API keys are not used."
	if r.TLS == nil {
		msg = "Refused: this console (--auth mtls) is served over plain HTTP, where a browser cannot present a client certificate: " +
			"serve it over TLS (leasehold serve --http-tls)."
	}
	c.plainError(w, http.StatusForbidden, msg)
}

// refuseCert answers a request whose certificate the coordinator refused
// (no valid principal for its subject, or revoked).
func (c *console) refuseCert(w http.ResponseWriter, r *http.Request, err error) {
	c.log.InfoContext(r.Context(), "console request refused: the coordinator refused the client certificate",
		slog.String("remote", r.RemoteAddr), slog.String("error", err.Error()))
	c.plainError(w, http.StatusForbidden, "Refused: "+errorText(err)+
		"\nAsk an admin for a principal for your certificate's subject (leasehold key create --cert-cn NAME).")
}
