package main

// key create --kubernetes-secret: the first admin key of a Helm release,
// created offline and handed over in a Secret, never printed.

import (
	"context"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/kubesecret"
)

// kubeSecretKey is the key of the Secret's data that holds the API key.
const kubeSecretKey = "api-key"

// createKeyIntoSecret creates the key offline and stores it in the Secret
// f.kubeSecret of the pod's namespace, unless that Secret exists: then it
// creates nothing, so that running it again (a Helm upgrade) makes no
// second key. The key itself is never printed or logged.
func (c *cli) createKeyIntoSecret(ctx context.Context, f *keyCreateFlags, req *leaseholdv1.CreateApiKeyRequest) error {
	if f.databaseURL == "" && f.sqlitePath == "" {
		return usagef("--kubernetes-secret creates the key offline: give --database-url (or --sqlite-path)")
	}
	if req.GetCertificateCommonName() != "" {
		return usagef("--kubernetes-secret stores an API key; --cert-cn creates none")
	}
	cfg, err := kubesecret.InClusterConfig(c.getenv, c.kubeServiceAccountDir)
	if err != nil {
		return err
	}
	kc, err := kubesecret.New(cfg)
	if err != nil {
		return err
	}
	where := kc.Namespace() + "/" + f.kubeSecret
	exists, err := kc.Exists(ctx, f.kubeSecret)
	if err != nil {
		return err
	}
	if exists {
		fmt.Fprintf(c.stdout, "Secret %s exists: no key created\n", where)
		return nil
	}
	resp, err := c.createKeyOffline(ctx, f, req)
	if err != nil {
		return err
	}
	p := resp.GetPrincipal()
	labels := map[string]string{"app.kubernetes.io/part-of": "leasehold", "app.kubernetes.io/created-by": "leasehold-key-create"}
	if err := kc.Create(ctx, f.kubeSecret, map[string][]byte{kubeSecretKey: []byte(resp.GetSecret())}, labels); err != nil {
		return fmt.Errorf("key %s was created but not stored (%w): revoke it (leasehold key revoke %s) and run again", p.GetId(), err, p.GetId())
	}
	out := c.printer()
	if out.json {
		// The response without its secret.
		return out.message(&leaseholdv1.CreateApiKeyResponse{Principal: p})
	}
	if err := out.fields(principalFields(p)); err != nil {
		return err
	}
	fmt.Fprintf(out.notes, "The key is in Secret %s, key %s (kubectl -n %s get secret %s -o jsonpath='{.data.%s}' | base64 -d).\n",
		where, kubeSecretKey, kc.Namespace(), f.kubeSecret, kubeSecretKey)
	return nil
}
