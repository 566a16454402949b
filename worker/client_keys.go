package worker

// The identity side of Client: API keys (and certificate principals) and
// the audit log, through AdminService. Managing keys needs the admin role;
// reading the audit log, operator or admin.

import (
	"context"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// CreateAPIKey creates a principal in the caller's tenant: an API key,
// whose secret is in the response and nowhere else (it cannot be shown
// again), or, with req.CertificateCommonName, the principal of client
// certificates with that common name.
func (c *Client) CreateAPIKey(ctx context.Context, req *leaseholdv1.CreateApiKeyRequest) (*leaseholdv1.CreateApiKeyResponse, error) {
	resp, err := c.admin.CreateApiKey(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: create API key: %w", err)
	}
	return resp, nil
}

// ListAPIKeys lists the principals of the caller's tenant, oldest first,
// revoked ones too when includeRevoked. Secrets are never listed.
func (c *Client) ListAPIKeys(ctx context.Context, includeRevoked bool) ([]*leaseholdv1.Principal, error) {
	resp, err := c.admin.ListApiKeys(ctx, &leaseholdv1.ListApiKeysRequest{IncludeRevoked: includeRevoked})
	if err != nil {
		return nil, fmt.Errorf("leasehold: list API keys: %w", err)
	}
	return resp.GetPrincipals(), nil
}

// RevokeAPIKey revokes a principal by id; every coordinator refuses it
// within seconds. Revoking twice returns it unchanged.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) (*leaseholdv1.Principal, error) {
	resp, err := c.admin.RevokeApiKey(ctx, &leaseholdv1.RevokeApiKeyRequest{Id: id})
	if err != nil {
		return nil, fmt.Errorf("leasehold: revoke API key %s: %w", id, err)
	}
	return resp.GetPrincipal(), nil
}

// ListAuditEvents returns one page of the audit log, newest first. Pass
// the response's NextPageToken in req.PageToken for the next page.
func (c *Client) ListAuditEvents(ctx context.Context, req *leaseholdv1.ListAuditEventsRequest) (*leaseholdv1.ListAuditEventsResponse, error) {
	resp, err := c.admin.ListAuditEvents(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: list audit events: %w", err)
	}
	return resp, nil
}
