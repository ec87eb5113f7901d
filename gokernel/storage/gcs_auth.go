package storage

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// GCS credentials, as object_store finds them: a static token, a service
// account (self-signed JWT, no token exchange), application default
// credentials (a service account or a gcloud user's refresh token), or the
// metadata server of the machine.

const (
	gcsDefaultBaseURL = "https://storage.googleapis.com"
	gcsScope          = "https://www.googleapis.com/auth/cloud-platform"
)

// Token endpoints; variables so that tests can point them at loopback.
var (
	gcsRefreshTokenURL = "https://accounts.google.com/o/oauth2/token"
	gcsMetadataHost    = "metadata.google.internal"
	gcsMetadataIP      = "169.254.169.254"
)

// authorizer turns into the function that signs a store's requests; c is
// the store's client (token endpoints are reached with the same settings).
type authorizer interface {
	authorize(c *rest) func(ctx context.Context, r *http.Request) error
}

// bearer is an OAuth bearer token source.
type bearer struct {
	static string
	fetch  func(ctx context.Context, c *rest) (string, time.Duration, error)
	sec    *secrets
}

func (b *bearer) authorize(c *rest) func(ctx context.Context, r *http.Request) error {
	if b.static != "" {
		return func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+b.static)
			return nil
		}
	}
	tc := &tokenCache{sec: b.sec}
	tokenClient := *c
	tokenClient.auth = nil
	tc.fetch = func(ctx context.Context) (string, time.Duration, error) { return b.fetch(ctx, &tokenClient) }
	return func(ctx context.Context, r *http.Request) error {
		tok, err := tc.get(ctx)
		if err != nil {
			return err
		}
		r.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
}

// gcsServiceAccount is a service account key file, with object_store's two
// extensions for emulators (gcs_base_url, disable_oauth).
type gcsServiceAccount struct {
	Type         string `json:"type"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	ClientEmail  string `json:"client_email"`
	GCSBaseURL   string `json:"gcs_base_url"`
	DisableOAuth bool   `json:"disable_oauth"`
	// authorized_user (application default credentials of a gcloud user)
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RefreshToken string `json:"refresh_token"`
}

func readCredentialsFile(what, path string) ([]byte, error) {
	data, err := readSmallFile(path)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok {
			err = pe.Err
		}
		return nil, fmt.Errorf("%w: storage: cannot read the %s file %s: %v", errkind.InvalidInput, what, path, err)
	}
	return data, nil
}

func parseServiceAccount(what string, data []byte) (gcsServiceAccount, error) {
	var sa gcsServiceAccount
	if err := json.Unmarshal(data, &sa); err != nil {
		// The JSON error may quote the key's text: keep only its kind.
		return sa, fmt.Errorf("%w: storage: the %s is not valid JSON", errkind.InvalidInput, what)
	}
	return sa, nil
}

// gcsCredentials picks the credentials cfg asks for and the base URL a
// service account names. It reads files and parses keys now; tokens are
// fetched when first needed.
func gcsCredentials(cfg GCSConfig, sec *secrets) (authorizer, string, error) {
	base := gcsDefaultBaseURL
	sec.add(cfg.Token)
	var sa *gcsServiceAccount
	switch {
	case cfg.ServiceAccountKey != "":
		s, err := parseServiceAccount("service account key", []byte(cfg.ServiceAccountKey))
		if err != nil {
			return nil, "", err
		}
		sa = &s
	case cfg.ServiceAccountPath != "":
		data, err := readCredentialsFile("service account", cfg.ServiceAccountPath)
		if err != nil {
			return nil, "", err
		}
		s, err := parseServiceAccount("service account file "+cfg.ServiceAccountPath, data)
		if err != nil {
			return nil, "", err
		}
		sa = &s
	}
	if sa != nil {
		sec.add(sa.PrivateKey)
		if sa.GCSBaseURL != "" {
			base = sa.GCSBaseURL
		}
	}
	switch {
	case cfg.SkipSignature:
		return nil, base, nil
	case cfg.Token != "":
		return &bearer{static: cfg.Token, sec: sec}, base, nil
	case sa != nil && sa.DisableOAuth:
		return nil, base, nil
	case sa != nil:
		signer, err := newJWTSigner(*sa, "service account")
		if err != nil {
			return nil, "", err
		}
		return signer, base, nil
	}
	adcPath := cfg.ApplicationCredentials
	if adcPath == "" {
		if home := getenv("HOME"); home != "" {
			p := filepath.Join(home, ".config", "gcloud", "application_default_credentials.json")
			if _, err := os.Stat(p); err == nil {
				adcPath = p
			}
		}
	}
	if adcPath != "" {
		data, err := readCredentialsFile("application default credentials", adcPath)
		if err != nil {
			return nil, "", err
		}
		adc, err := parseServiceAccount("application default credentials file "+adcPath, data)
		if err != nil {
			return nil, "", err
		}
		switch adc.Type {
		case "service_account":
			sec.add(adc.PrivateKey)
			signer, err := newJWTSigner(adc, "application default credentials")
			return signer, base, err
		case "authorized_user":
			sec.add(adc.ClientSecret, adc.RefreshToken)
			return &bearer{sec: sec, fetch: func(ctx context.Context, c *rest) (string, time.Duration, error) {
				form := url.Values{"grant_type": {"refresh_token"}, "client_id": {adc.ClientID},
					"client_secret": {adc.ClientSecret}, "refresh_token": {adc.RefreshToken}}
				return fetchToken(ctx, c, "refresh the gcloud user token", http.MethodPost, gcsRefreshTokenURL, form, nil)
			}}, base, nil
		default:
			return nil, "", fmt.Errorf("%w: storage: application default credentials of type %q are not supported (service_account and authorized_user are)",
				errkind.Unsupported, adc.Type)
		}
	}
	return &bearer{sec: sec, fetch: gcsMetadataToken}, base, nil
}

// jwtSigner makes the self-signed JWTs GCS takes as bearer tokens from a
// service account (no exchange at a token endpoint), valid one hour.
type jwtSigner struct {
	key   *rsa.PrivateKey
	keyID string
	email string
}

func newJWTSigner(sa gcsServiceAccount, what string) (*jwtSigner, error) {
	block, _ := pem.Decode([]byte(sa.PrivateKey))
	if block == nil {
		return nil, fmt.Errorf("%w: storage: the %s has no PEM private key", errkind.InvalidInput, what)
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%w: storage: the %s's private key is not an RSA key", errkind.InvalidInput, what)
		}
		key = rk
	} else if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		key = k
	} else {
		return nil, fmt.Errorf("%w: storage: the %s's private key cannot be parsed (PKCS#8 or PKCS#1 RSA expected)", errkind.InvalidInput, what)
	}
	if sa.ClientEmail == "" {
		return nil, fmt.Errorf("%w: storage: the %s has no client_email", errkind.InvalidInput, what)
	}
	return &jwtSigner{key: key, keyID: sa.PrivateKeyID, email: sa.ClientEmail}, nil
}

func (j *jwtSigner) token(now time.Time) (string, error) {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	header := map[string]string{"alg": "RS256", "typ": "JWT"}
	if j.keyID != "" {
		header["kid"] = j.keyID
	}
	claims := map[string]any{"iss": j.email, "sub": j.email, "scope": gcsScope,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	msg := enc(header) + "." + enc(claims)
	sum := sha256.Sum256([]byte(msg))
	sig, err := rsa.SignPKCS1v15(rand.Reader, j.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("%w: storage: signing a service account token: %v", errkind.InvalidInput, err)
	}
	return msg + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

func (j *jwtSigner) authorize(c *rest) func(ctx context.Context, r *http.Request) error {
	tc := &tokenCache{sec: c.secret, fetch: func(context.Context) (string, time.Duration, error) {
		tok, err := j.token(time.Now())
		return tok, time.Hour, err
	}}
	return func(ctx context.Context, r *http.Request) error {
		tok, err := tc.get(ctx)
		if err != nil {
			return err
		}
		r.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
}

// gcsMetadataToken asks the machine's metadata server (GCE_METADATA_HOST
// or GCE_METADATA_ROOT, then GCE_METADATA_IP) for the default service
// account's token.
func gcsMetadataToken(ctx context.Context, c *rest) (string, time.Duration, error) {
	host := firstEnv("GCE_METADATA_HOST", "GCE_METADATA_ROOT")
	if host == "" {
		host = gcsMetadataHost
	}
	ip := firstEnv("GCE_METADATA_IP")
	if ip == "" {
		ip = gcsMetadataIP
	}
	short := *c
	short.cfg.MaxRetries = min(c.cfg.MaxRetries, 2)
	hc := *c.hc
	hc.Timeout = 10 * time.Second
	short.hc = &hc
	var err error
	for _, h := range []string{host, ip} {
		u := "http://" + h + "/computeMetadata/v1/instance/service-accounts/default/token?audience=" +
			url.QueryEscape("https://www.googleapis.com/oauth2/v4/token")
		var tok string
		var ttl time.Duration
		tok, ttl, err = fetchToken(ctx, &short, "get a token from the metadata server", http.MethodGet, u, nil,
			map[string]string{"Metadata-Flavor": "Google"})
		if err == nil {
			return tok, ttl, nil
		}
	}
	return "", 0, fmt.Errorf("%w: storage: no GCS credentials: set service_account, service_account_key, application_credentials or google_storage_token "+
		"(or GOOGLE_APPLICATION_CREDENTIALS), or run where a metadata server answers: %v", errkind.InvalidInput, err)
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// fetchToken calls an OAuth token endpoint (a form POST, or a GET) and
// reads {"access_token", "expires_in"}. A refusal is errkind.InvalidInput.
func fetchToken(ctx context.Context, c *rest, what, method, u string, form url.Values, headers map[string]string) (string, time.Duration, error) {
	var body []byte
	if form != nil {
		body = []byte(form.Encode())
	}
	var out struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
		ExpiresOn   json.RawMessage `json:"expires_on"`
	}
	mk := func() (*http.Request, error) {
		r, err := newRequest(method, u, body)()
		if err != nil {
			return nil, err
		}
		if form != nil {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		return r, nil
	}
	where := u
	if pu, err := url.Parse(u); err == nil {
		where = pu.Scheme + "://" + pu.Host + pu.Path
	}
	err := c.do(ctx, what, "at "+where, mk, func(resp *http.Response) error {
		if resp.StatusCode/100 != 2 {
			err := c.statusError(what, "at "+where, resp)
			if resp.StatusCode/100 == 4 && !strings.Contains(err.Error(), "check the credentials") {
				// A token endpoint that refuses is a credentials problem,
				// whatever the status (400 invalid_grant, 404 unknown tenant).
				return fmt.Errorf("%w: %s (check the credentials)", errkind.InvalidInput, strings.TrimPrefix(err.Error(), errkind.NotFound.Error()+": "))
			}
			return err
		}
		return decodeJSON(resp, &out)
	})
	if err != nil {
		return "", 0, err
	}
	if out.AccessToken == "" {
		return "", 0, fmt.Errorf("%w: storage: %s: the answer has no access_token", errkind.InvalidInput, what)
	}
	c.secret.add(out.AccessToken)
	return out.AccessToken, parseTTL(out.ExpiresIn, out.ExpiresOn), nil
}

// parseTTL reads expires_in (seconds, a number or a string) or expires_on
// (Unix seconds, Azure's managed identity endpoint).
func parseTTL(in, on json.RawMessage) time.Duration {
	num := func(raw json.RawMessage) int64 {
		s := strings.Trim(string(raw), `"`)
		var n int64
		if _, err := fmt.Sscan(s, &n); err != nil {
			return 0
		}
		return n
	}
	if n := num(in); n > 0 {
		return time.Duration(n) * time.Second
	}
	if n := num(on); n > 0 {
		return time.Until(time.Unix(n, 0))
	}
	return time.Hour
}
