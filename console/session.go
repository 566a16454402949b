package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// sessionCookie is the name of the console's one cookie.
const sessionCookie = "leasehold_console"

// session is what the cookie carries, sealed: nothing in it is readable or
// changeable without the session key. Key is the API key the person signed
// in with (empty before sign-in and with AuthNone); the console never
// keeps it anywhere else, and the coordinator checks it on every call, so
// revoking the key ends the session within the coordinator's auth cache
// bound.
type session struct {
	// ID is random per sign-in; CSRF tokens are bound to it.
	ID string `json:"id"`
	// Key is the API key; empty when not signed in.
	Key string `json:"key,omitempty"`
	// Expires is when the session ends (Unix seconds).
	Expires int64 `json:"exp"`
	// Cert identifies the client certificate the session was started
	// with (AuthMTLS): another certificate gets another session.
	Cert string `json:"crt,omitempty"`
}

var errBadSession = errors.New("console: invalid session cookie")

// sealer seals sessions with AES-256-GCM and signs CSRF tokens with
// HMAC-SHA256, under keys derived from the session key.
type sealer struct {
	aead    cipher.AEAD
	csrfKey []byte
}

func newSealer(key []byte) (sealer, error) {
	block, err := aes.NewCipher(derive(key, "seal"))
	if err != nil {
		return sealer{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealer{}, err
	}
	return sealer{aead: aead, csrfKey: derive(key, "csrf")}, nil
}

// derive is HMAC-SHA256(key, label): one key per use.
func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("leasehold console " + label))
	return m.Sum(nil)
}

// seal encodes s for the cookie.
func (s sealer) seal(v session) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := s.aead.Seal(nonce, nonce, plain, []byte(sessionCookie))
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// open decodes a cookie value; an expired, forged or garbled one is
// errBadSession.
func (s sealer) open(value string, now time.Time) (session, error) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return session{}, errBadSession
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(sessionCookie))
	if err != nil {
		return session{}, errBadSession
	}
	var v session
	if err := json.Unmarshal(plain, &v); err != nil || v.ID == "" {
		return session{}, errBadSession
	}
	if now.Unix() >= v.Expires {
		return session{}, errBadSession
	}
	return v, nil
}

// csrfToken is the token every form of session id carries.
func (s sealer) csrfToken(id string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether token is session id's, in constant time.
func (s sealer) checkCSRF(id, token string) bool {
	return token != "" && hmac.Equal([]byte(s.csrfToken(id)), []byte(token))
}

// newSessionID is 128 random bits.
func newSessionID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// readSession is the request's session, or ok false when it has none
// (missing, expired or forged).
func (c *console) readSession(r *http.Request) (session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	s, err := c.sessions.open(ck.Value, time.Now())
	return s, err == nil
}

// startSession makes a new session holding key (empty: not signed in) and
// sets its cookie.
func (c *console) startSession(w http.ResponseWriter, r *http.Request, key string) (session, error) {
	return c.newSession(w, r, session{Key: key})
}

// newSession gives s a new id and expiry and sets its cookie.
func (c *console) newSession(w http.ResponseWriter, r *http.Request, s session) (session, error) {
	id, err := newSessionID()
	if err != nil {
		return session{}, err
	}
	s.ID, s.Expires = id, time.Now().Add(c.cfg.SessionTTL).Unix()
	v, err := c.sessions.seal(s)
	if err != nil {
		return session{}, err
	}
	http.SetCookie(w, c.cookie(r, v, int(c.cfg.SessionTTL.Seconds())))
	return s, nil
}

// endSession clears the cookie.
func (c *console) endSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, c.cookie(r, "", -1))
}

// cookie is the session cookie: HttpOnly, SameSite=Strict, scoped to the
// console's prefix, and Secure whenever the request came over TLS.
func (c *console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{ //nolint:gosec // G124: Secure follows the request: set over TLS; plain HTTP reaches the console from loopback only (keyAllowedHere)
		Name: sessionCookie, Value: value, Path: c.cfg.Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}
