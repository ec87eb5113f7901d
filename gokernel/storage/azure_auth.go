package storage

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Azure credentials, as object_store finds them: Shared Key signing with
// the account key, a SAS token, a bearer token, or a token from Microsoft
// Entra ID (service principal secret, workload identity, managed identity,
// Azure CLI).

const azureStorageResource = "https://storage.azure.com"

// Token endpoints; variables so that tests can point them at loopback.
var (
	azureAuthorityHost = "https://login.microsoftonline.com"
	azureIMDSEndpoint  = "http://169.254.169.254/metadata/identity/oauth2/token"
	azureCLI           = "az"
)

type azureAuth func(c *rest) func(ctx context.Context, r *http.Request) error

// azureCredentials picks the credentials cfg asks for (object_store's
// order). Every request gets the service version and a date, whatever
// the credentials.
func azureCredentials(cfg AzureConfig, account string, sec *secrets) (azureAuth, error) {
	sec.add(cfg.Token, cfg.AccessKey, cfg.SASToken, cfg.ClientSecret)
	stamp := func(r *http.Request) {
		r.Header.Set("x-ms-version", azureVersion)
		r.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	}
	plain := func(c *rest) func(ctx context.Context, r *http.Request) error {
		return func(_ context.Context, r *http.Request) error { stamp(r); return nil }
	}
	withBearer := func(b *bearer) azureAuth {
		return func(c *rest) func(ctx context.Context, r *http.Request) error {
			sign := b.authorize(c)
			return func(ctx context.Context, r *http.Request) error {
				stamp(r)
				return sign(ctx, r)
			}
		}
	}
	sharedKey := func(key string) (azureAuth, error) {
		raw, err := base64.StdEncoding.DecodeString(key)
		if err != nil {
			return nil, fmt.Errorf("%w: storage: the Azure account key is not base64", errkind.InvalidInput)
		}
		return func(c *rest) func(ctx context.Context, r *http.Request) error {
			return func(_ context.Context, r *http.Request) error {
				stamp(r)
				r.Header.Set("Authorization", "SharedKey "+account+":"+sharedKeySignature(raw, account, r))
				return nil
			}
		}, nil
	}
	sas := func(token string) (azureAuth, error) {
		q, err := url.ParseQuery(strings.TrimPrefix(token, "?"))
		if err != nil || len(q) == 0 {
			return nil, fmt.Errorf("%w: storage: the Azure SAS token is not a query string", errkind.InvalidInput)
		}
		for _, v := range q["sig"] {
			sec.add(v, url.QueryEscape(v))
		}
		return func(c *rest) func(ctx context.Context, r *http.Request) error {
			return func(_ context.Context, r *http.Request) error {
				stamp(r)
				have := r.URL.Query()
				for k, vs := range q {
					for _, v := range vs {
						have.Add(k, v)
					}
				}
				r.URL.RawQuery = have.Encode()
				return nil
			}
		}, nil
	}
	if cfg.SkipSignature {
		return plain, nil
	}
	if cfg.UseEmulator {
		switch {
		case cfg.AccessKey != "":
			return sharedKey(cfg.AccessKey)
		case cfg.Token != "":
			return withBearer(&bearer{static: cfg.Token, sec: sec}), nil
		case cfg.SASToken != "":
			return sas(cfg.SASToken)
		default:
			return sharedKey(azureEmulatorKey)
		}
	}
	authority := strings.TrimRight(cfg.AuthorityHost, "/")
	if authority == "" {
		authority = azureAuthorityHost
	}
	entra := func(form url.Values) *bearer {
		return &bearer{sec: sec, fetch: func(ctx context.Context, c *rest) (string, time.Duration, error) {
			u := authority + "/" + url.PathEscape(cfg.TenantID) + "/oauth2/v2.0/token"
			form.Set("scope", azureStorageResource+"/.default")
			form.Set("grant_type", "client_credentials")
			form.Set("client_id", cfg.ClientID)
			return fetchToken(ctx, c, "get an Entra ID token", http.MethodPost, u, form, nil)
		}}
	}
	switch {
	case cfg.fabricToken:
		return nil, fmt.Errorf("%w: storage: Microsoft Fabric token service credentials (fabric_*) are not supported; use a bearer token, an account key or a SAS token",
			errkind.Unsupported)
	case cfg.Token != "":
		return withBearer(&bearer{static: cfg.Token, sec: sec}), nil
	case cfg.AccessKey != "":
		return sharedKey(cfg.AccessKey)
	case cfg.ClientID != "" && cfg.TenantID != "" && cfg.FederatedTokenFile != "":
		file := cfg.FederatedTokenFile
		b := &bearer{sec: sec}
		b.fetch = func(ctx context.Context, c *rest) (string, time.Duration, error) {
			assertion, err := readSmallFile(file)
			if err != nil {
				return "", 0, fmt.Errorf("%w: storage: cannot read the federated token file %s: %v", errkind.InvalidInput, file, err)
			}
			sec.add(strings.TrimSpace(string(assertion)))
			return entra(url.Values{
				"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
				"client_assertion":      {strings.TrimSpace(string(assertion))},
			}).fetch(ctx, c)
		}
		return withBearer(b), nil
	case cfg.ClientID != "" && cfg.ClientSecret != "" && cfg.TenantID != "":
		return withBearer(entra(url.Values{"client_secret": {cfg.ClientSecret}})), nil
	case cfg.SASToken != "":
		return sas(cfg.SASToken)
	case cfg.UseAzureCLI:
		return withBearer(&bearer{sec: sec, fetch: azureCLIToken}), nil
	default:
		return withBearer(&bearer{sec: sec, fetch: func(ctx context.Context, c *rest) (string, time.Duration, error) {
			return azureManagedIdentityToken(ctx, c, cfg)
		}}), nil
	}
}

// sharedKeySignature signs a request for the Blob service's Shared Key
// scheme: HMAC-SHA256 over the verb, the standard headers, the x-ms-*
// headers and the canonical resource (/account/path plus sorted query).
func sharedKeySignature(key []byte, account string, r *http.Request) string {
	h := r.Header
	length := ""
	if r.ContentLength > 0 {
		length = strconv.FormatInt(r.ContentLength, 10)
	}
	var sb strings.Builder
	for _, v := range []string{r.Method, h.Get("Content-Encoding"), h.Get("Content-Language"), length,
		h.Get("Content-MD5"), h.Get("Content-Type"), "", h.Get("If-Modified-Since"), h.Get("If-Match"),
		h.Get("If-None-Match"), h.Get("If-Unmodified-Since"), h.Get("Range")} {
		sb.WriteString(v)
		sb.WriteByte('\n')
	}
	var names []string
	for k := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-") {
			names = append(names, lk)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		sb.WriteString(n + ":" + strings.TrimSpace(h.Get(n)) + "\n")
	}
	sb.WriteString("/" + account + r.URL.EscapedPath())
	q := r.URL.Query()
	params := make([]string, 0, len(q))
	for k := range q {
		params = append(params, k)
	}
	sort.Slice(params, func(i, j int) bool { return strings.ToLower(params[i]) < strings.ToLower(params[j]) })
	for _, k := range params {
		vs := append([]string(nil), q[k]...)
		sort.Strings(vs)
		sb.WriteString("\n" + strings.ToLower(k) + ":" + strings.Join(vs, ","))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(sb.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// azureManagedIdentityToken asks the managed identity endpoint
// (msi_endpoint, IDENTITY_ENDPOINT, else the instance metadata service).
func azureManagedIdentityToken(ctx context.Context, c *rest, cfg AzureConfig) (string, time.Duration, error) {
	endpoint := cfg.MSIEndpoint
	if endpoint == "" {
		endpoint = azureIMDSEndpoint
	}
	q := url.Values{"api-version": {"2019-08-01"}, "resource": {azureStorageResource}}
	switch {
	case cfg.ClientID != "":
		q.Set("client_id", cfg.ClientID)
	case cfg.ObjectID != "":
		q.Set("object_id", cfg.ObjectID)
	case cfg.MSIResourceID != "":
		q.Set("msi_res_id", cfg.MSIResourceID)
	}
	headers := map[string]string{"Metadata": "true"}
	if h := getenv("IDENTITY_HEADER"); h != "" {
		headers["X-IDENTITY-HEADER"] = h
		c.secret.add(h)
	}
	short := *c
	short.cfg.MaxRetries = min(c.cfg.MaxRetries, 2)
	hc := *c.hc
	hc.Timeout = 10 * time.Second
	short.hc = &hc
	sep := "?"
	if strings.Contains(endpoint, "?") {
		sep = "&"
	}
	tok, ttl, err := fetchToken(ctx, &short, "get a managed identity token", http.MethodGet, endpoint+sep+q.Encode(), nil, headers)
	if err != nil {
		return "", 0, fmt.Errorf("%w: storage: no Azure credentials: set account_key, sas_token, bearer_token, or client_id with client_secret and tenant_id "+
			"(or AZURE_STORAGE_ACCOUNT_KEY, ...), or run where a managed identity endpoint answers: %v", errkind.InvalidInput, err)
	}
	return tok, ttl, nil
}

// azureCLIToken runs `az account get-access-token` for the storage
// resource.
func azureCLIToken(ctx context.Context, c *rest) (string, time.Duration, error) {
	cmd := exec.CommandContext(ctx, azureCLI, "account", "get-access-token", "--output", "json", "--resource", azureStorageResource)
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			msg = firstLine(strings.TrimSpace(string(ee.Stderr)))
		}
		return "", 0, fmt.Errorf("%w: storage: use_azure_cli: `az account get-access-token` failed: %s", errkind.InvalidInput, msg)
	}
	var tok struct {
		AccessToken string `json:"accessToken"`
		ExpiresOn   int64  `json:"expires_on"`
	}
	if err := json.Unmarshal(out, &tok); err != nil || tok.AccessToken == "" {
		return "", 0, fmt.Errorf("%w: storage: use_azure_cli: `az account get-access-token` gave no token", errkind.InvalidInput)
	}
	c.secret.add(tok.AccessToken)
	ttl := time.Hour
	if tok.ExpiresOn > 0 {
		ttl = time.Until(time.Unix(tok.ExpiresOn, 0))
	}
	return tok.AccessToken, ttl, nil
}
