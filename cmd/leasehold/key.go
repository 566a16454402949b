package main

// "key" manages API keys and certificate principals, through AdminService
// or, to bootstrap the first admin key, straight against the database.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) keyCommand() *cobra.Command {
	return c.group("key", "Create, list and revoke API keys",
		c.keyCreateCommand(),
		c.keyListCommand(),
		c.keyRevokeCommand(),
	)
}

// keyCreateFlags are key create's own flags.
type keyCreateFlags struct {
	role        string
	tenant      string
	queues      commaList
	name        string
	certCN      string
	databaseURL string
	sqlitePath  string
	kubeSecret  string
}

func (c *cli) keyCreateCommand() *cobra.Command {
	var f keyCreateFlags
	cmd := &cobra.Command{
		Use:   "create --role ROLE [--tenant T] [--queue PATTERN]... [--name N] [--cert-cn CN] [--database-url URL | --sqlite-path FILE]",
		Short: "Create an API key (shown once) or a client-certificate principal",
		Long: "Create an API key with a role (" + roleNames() + "), in a tenant, optionally limited to queues\n" +
			"(--queue emails --queue 'billing.*'). The key is printed once and stored only as a hash: keep it.\n" +
			"With --cert-cn, create instead the principal of client certificates with that common name (--auth mtls).\n\n" +
			"With --database-url or --sqlite-path the principal is written straight into that database, without a\n" +
			"coordinator and without credentials: this is how the first admin key is made. Otherwise it is created\n" +
			"through the coordinator at --addr, by an admin, in the admin's own tenant.",
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			role, err := parseRole(f.role)
			if err != nil {
				return err
			}
			req := &leaseholdv1.CreateApiKeyRequest{
				Name: f.name, Role: role, Tenant: f.tenant, Queues: f.queues, CertificateCommonName: f.certCN,
			}
			if f.kubeSecret != "" {
				return c.createKeyIntoSecret(cmd.Context(), &f, req)
			}
			if f.databaseURL != "" || f.sqlitePath != "" {
				resp, err := c.createKeyOffline(cmd.Context(), &f, req)
				if err != nil {
					return err
				}
				return c.printCreatedKey(c.printer(), resp)
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.CreateAPIKey(ctx, req)
				if err != nil {
					return err
				}
				return c.printCreatedKey(out, resp)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.role, "role", "", "what it may do: "+roleNames()+" (required)")
	fs.StringVar(&f.tenant, "tenant", "", "its tenant; through a coordinator: the caller's (the default); offline: default \""+coordinator.TenantDefault+"\"")
	fs.Var(&f.queues, "queue", "`pattern` of the queues it is limited to (e.g. emails, billing.*); repeatable; none: every queue")
	fs.StringVar(&f.name, "name", "", "a label for people")
	fs.StringVar(&f.certCN, "cert-cn", "", "create the principal of client certificates with this subject common name instead of a key")
	fs.StringVar(&f.databaseURL, "database-url", "", "create it offline in this PostgreSQL database (migrated first)")
	fs.StringVar(&f.sqlitePath, "sqlite-path", "", "create it offline in this SQLite file (created and migrated when needed)")
	fs.StringVar(&f.kubeSecret, "kubernetes-secret", "", "offline, from inside a Kubernetes pod: store the key in this Secret of the pod's namespace (key "+kubeSecretKey+") instead of printing it; "+
		"when the Secret exists, create nothing (the Helm chart's bootstrap Job)")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(roleList(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func roleList() []string {
	out := make([]string, len(store.Roles))
	for i, r := range store.Roles {
		out[i] = string(r)
	}
	return out
}

func roleNames() string { return strings.Join(roleList(), ", ") }

func parseRole(s string) (leaseholdv1.Role, error) {
	if s == "" {
		return 0, usagef("--role is required: %s", roleNames())
	}
	r := store.Role(strings.ToLower(s))
	if !r.Valid() {
		return 0, usagef("--role %q: use %s", s, roleNames())
	}
	return coordinator.RoleToProto(r), nil
}

// createKeyOffline writes the principal straight into the database: no
// coordinator, no credentials (whoever can write the database is already
// all-powerful). The audit log records the actor "offline".
func (c *cli) createKeyOffline(ctx context.Context, f *keyCreateFlags, req *leaseholdv1.CreateApiKeyRequest) (*leaseholdv1.CreateApiKeyResponse, error) {
	if f.databaseURL != "" && f.sqlitePath != "" {
		return nil, usagef("--database-url and --sqlite-path: give one")
	}
	role, _ := coordinator.RoleFromProto(req.GetRole())
	p := store.CreatePrincipalParams{
		Tenant: f.tenant, Name: req.GetName(), Role: role, Queues: req.GetQueues(), Actor: store.ActorOffline,
	}
	if p.Tenant == "" {
		p.Tenant = coordinator.TenantDefault
	}
	var secret string
	if cn := req.GetCertificateCommonName(); cn != "" {
		p.CertSubject = store.CertSubjectFor(cn)
	} else {
		var err error
		if secret, p.KeyHash, err = coordinator.NewAPIKey(); err != nil {
			return nil, err
		}
	}
	// The offline path applies the validation the coordinator would, so
	// that a bad flag is a usage error rather than a store error.
	if err := store.ValidateCreatePrincipal(p); err != nil {
		return nil, usageFromInvalid(err)
	}
	st, err := openStore(ctx, slog.New(slog.DiscardHandler), storeFlags{databaseURL: f.databaseURL, sqlitePath: f.sqlitePath}, true, store.EngineOptions{})
	if err != nil {
		return nil, usageFromInvalid(err)
	}
	defer func() { _ = st.Close() }() // the principal is committed: failing now would lose its secret
	pr, err := st.CreatePrincipal(ctx, p)
	if err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, fmt.Errorf("a valid principal already has the common name %q: revoke it first", req.GetCertificateCommonName())
		}
		return nil, err
	}
	return &leaseholdv1.CreateApiKeyResponse{Principal: coordinator.ToPrincipal(pr), Secret: secret}, nil
}

// usageFromInvalid makes a validation error a usage error naming the flag.
func usageFromInvalid(err error) error {
	var inv *store.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	flag := strings.ReplaceAll(inv.Field, "_", "-")
	switch {
	case strings.HasPrefix(inv.Field, "queues"):
		flag = "queue"
	case inv.Field == "cert_subject" || inv.Field == "certificate_common_name":
		flag = "cert-cn"
	}
	return usagef("--%s: %s", flag, inv.Reason)
}

// printCreatedKey prints the new principal and, once, its secret. In
// table form the secret is the last line of stdout and a reminder goes to
// stderr, so `leasehold key create ... | tail -n 1` captures the key.
func (c *cli) printCreatedKey(out *printer, resp *leaseholdv1.CreateApiKeyResponse) error {
	if out.json {
		return out.message(resp)
	}
	p := resp.GetPrincipal()
	pairs := principalFields(p)
	if resp.GetSecret() != "" {
		pairs = append(pairs, [2]string{"Key", resp.GetSecret()})
	}
	if err := out.fields(pairs); err != nil {
		return err
	}
	if resp.GetSecret() != "" {
		fmt.Fprintln(out.notes, "The key is shown only now and stored only as a hash: keep it safe (e.g. in LEASEHOLD_API_KEY).")
	}
	return nil
}

func principalFields(p *leaseholdv1.Principal) [][2]string {
	return [][2]string{
		{"ID", p.GetId()},
		{"Identity", p.GetIdentity()},
		{"Name", p.GetName()},
		{"Role", roleName(p.GetRole())},
		{"Tenant", p.GetTenant()},
		{"Queues", queuesCell(p.GetQueues())},
		{"Created", formatTime(p.GetCreatedAt())},
		{"Created by", p.GetCreatedBy()},
		{"Last used", formatTime(p.GetLastUsedAt())},
		{"Revoked", formatTime(p.GetRevokedAt())},
	}
}

func roleName(r leaseholdv1.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

func queuesCell(qs []string) string {
	if len(qs) == 0 {
		return "*"
	}
	return strings.Join(qs, ",")
}

var principalHeader = []string{"ID", "NAME", "ROLE", "TENANT", "QUEUES", "IDENTITY", "CREATED", "LAST USED", "REVOKED"}

func principalRow(p *leaseholdv1.Principal) []string {
	return []string{
		p.GetId(), p.GetName(), roleName(p.GetRole()), p.GetTenant(), queuesCell(p.GetQueues()),
		shorten(p.GetIdentity(), 48), formatTime(p.GetCreatedAt()), formatTime(p.GetLastUsedAt()), formatTime(p.GetRevokedAt()),
	}
}

func (c *cli) keyListCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list [--all]",
		Short: "List the API keys and principals of your tenant (never their secrets)",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				ps, err := client.ListAPIKeys(ctx, all)
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListApiKeysResponse{Principals: ps}, header: principalHeader,
					rows: rows(ps, principalRow), empty: "no API keys"})
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include revoked keys")
	return cmd
}

func (c *cli) keyRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key or principal (every coordinator refuses it within seconds)",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				p, err := client.RevokeAPIKey(ctx, args[0])
				if err != nil {
					return err
				}
				return out.say(&leaseholdv1.RevokeApiKeyResponse{Principal: p}, "%s (%s) revoked at %s",
					p.GetId(), p.GetIdentity(), formatTime(p.GetRevokedAt()))
			})
		},
	}
}

func (c *cli) auditCommand() *cobra.Command {
	return c.group("audit", "Read the audit log of operator actions",
		c.auditListCommand(),
	)
}

var auditHeader = []string{"TIME", "ACTOR", "ACTION", "TARGET", "DATA"}

func auditRow(e *leaseholdv1.AuditEvent) []string {
	actor := e.GetActor()
	if e.GetActorName() != "" {
		actor += " (" + e.GetActorName() + ")"
	}
	return []string{
		formatTime(e.GetTime()), actor,
		strings.ToLower(strings.TrimPrefix(e.GetAction().String(), "AUDIT_ACTION_")),
		e.GetTarget(), shorten(e.GetDataJson(), 80),
	}
}

func (c *cli) auditListCommand() *cobra.Command {
	var (
		req   leaseholdv1.ListAuditEventsRequest
		pages pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--limit N] [--page-token T]",
		Short: "List operator actions with who did them, newest first",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.PageSize, req.PageToken, err = pages.request(); err != nil {
				return err
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.ListAuditEvents(ctx, &req)
				if err != nil {
					return err
				}
				return out.list(page{resp: resp, header: auditHeader, rows: rows(resp.GetEvents(), auditRow),
					nextPageToken: resp.GetNextPageToken(), empty: "no audit events"})
			})
		},
	}
	fs := cmd.Flags()
	pages.add(fs)
	return cmd
}
