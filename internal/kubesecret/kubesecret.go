// Package kubesecret reads and creates one Kubernetes Secret through the
// API server, from inside a pod, with the pod's service account: what
// `leasehold key create --kubernetes-secret` needs to hand the first admin
// key to a Helm release without printing it.
//
// It speaks the two REST calls it needs (GET and POST of
// /api/v1/namespaces/NS/secrets) over net/http, so the binary does not
// carry client-go for them.
package kubesecret

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account
// token, its CA bundle and its namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// requestTimeout bounds each call to the API server.
const requestTimeout = 30 * time.Second

// responseMax bounds what is read of an API server answer.
const responseMax = 1 << 20

// ErrExists is returned by Create when the Secret already exists.
var ErrExists = errors.New("the Secret already exists")

// Config locates the API server and the credentials to call it with.
type Config struct {
	// Server is the API server's base URL, e.g. https://10.0.0.1:443.
	Server string
	// Token is the bearer token (the service account's).
	Token string
	// CAs verify the API server's certificate.
	CAs *x509.CertPool
	// Namespace is where the Secret lives.
	Namespace string
}

// InClusterConfig is the pod's own configuration: the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (read with getenv),
// the token, CA bundle and namespace from dir (ServiceAccountDir when
// empty).
func InClusterConfig(getenv func(string) string, dir string) (Config, error) {
	if dir == "" {
		dir = ServiceAccountDir
	}
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("the pod's service account (is automountServiceAccountToken off?): %w", err)
		}
		return b, nil
	}
	token, err := read("token")
	if err != nil {
		return Config{}, err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return Config{}, err
	}
	ns, err := read("namespace")
	if err != nil {
		return Config{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return Config{}, fmt.Errorf("%s: no PEM certificate", filepath.Join(dir, "ca.crt"))
	}
	return Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		Token:     strings.TrimSpace(string(token)),
		CAs:       pool,
		Namespace: strings.TrimSpace(string(ns)),
	}, nil
}

// Client calls the API server for the Secrets of one namespace.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.Server == "" || cfg.Namespace == "" {
		return nil, errors.New("kubesecret: Server and Namespace are required")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cfg.CAs, MinVersion: tls.VersionTLS12}}
	return &Client{cfg: cfg, http: &http.Client{Transport: tr, Timeout: requestTimeout}}, nil
}

// Namespace is the client's namespace.
func (c *Client) Namespace() string { return c.cfg.Namespace }

// Exists reports whether the Secret name exists.
func (c *Client) Exists(ctx context.Context, name string) (bool, error) {
	code, body, err := c.do(ctx, http.MethodGet, c.path()+"/"+url.PathEscape(name), nil)
	if err != nil {
		return false, err
	}
	switch code {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	default:
		return false, apiError("get", c.cfg.Namespace, name, code, body)
	}
}

// Create creates the Opaque Secret name with data and labels; ErrExists
// when it exists already (nothing is changed then).
func (c *Client) Create(ctx context.Context, name string, data map[string][]byte, labels map[string]string) error {
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"type":       "Opaque",
		"metadata":   map[string]any{"name": name, "namespace": c.cfg.Namespace, "labels": labels},
		"data":       data, // []byte encodes as base64, as the API wants
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	code, body, err := c.do(ctx, http.MethodPost, c.path(), b)
	if err != nil {
		return err
	}
	switch code {
	case http.StatusCreated, http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("secret %s/%s: %w", c.cfg.Namespace, name, ErrExists)
	default:
		return apiError("create", c.cfg.Namespace, name, code, body)
	}
}

func (c *Client) path() string {
	return "/api/v1/namespaces/" + url.PathEscape(c.cfg.Namespace) + "/secrets"
}

// do sends one request and returns the status code and the (bounded) body.
func (c *Client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.Server+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("kubernetes API %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }() // the body is read below; a close error changes nothing
	b, err := io.ReadAll(io.LimitReader(resp.Body, responseMax))
	if err != nil {
		return 0, nil, fmt.Errorf("kubernetes API %s %s: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// apiError turns an API server refusal into an error that says what to
// check. The body is a metav1.Status; only its message is kept (it never
// holds the Secret's data).
func apiError(op, ns, name string, code int, body []byte) error {
	var st struct {
		Message string `json:"message"`
	}
	msg := http.StatusText(code)
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	hint := ""
	if code == http.StatusForbidden || code == http.StatusUnauthorized {
		hint = " (the service account needs get and create on secrets in this namespace)"
	}
	return fmt.Errorf("kubernetes API: %s Secret %s/%s: %d %s%s", op, ns, name, code, msg, hint)
}
