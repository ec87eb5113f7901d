package storage

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/cloudtest"
)

// isolateEnv hides the machine's cloud credentials from a test: no
// gcloud application default credentials, no metadata server but a dead
// loopback port, no Azure or Google variables.
func isolateEnv(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	t.Setenv("GCE_METADATA_IP", "127.0.0.1:1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GOOGLE_") || strings.HasPrefix(k, "AZURE_") || strings.HasPrefix(k, "OBJECT_STORE_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func TestParseGCSOptions(t *testing.T) {
	isolateEnv(t)
	cfg, err := ParseGCSOptions(map[string]string{"GOOGLE_SERVICE_ACCOUNT_PATH": "/sa.json", "google_timeout": "1m30s",
		"allow_http": "Yes", "client_max_retries": "3", "client_retry_timeout": "60", "bucket": "ignored", "use_opendal": "false"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServiceAccountPath != "/sa.json" || cfg.Client.Timeout != 90*time.Second || !cfg.Client.AllowHTTP ||
		cfg.Client.MaxRetries != 3 || cfg.Client.RetryTimeout != time.Minute {
		t.Fatalf("%+v", cfg)
	}
	// Environment fallbacks, as lance reads them: any variable named like
	// a key; options win.
	t.Setenv("GOOGLE_SERVICE_ACCOUNT_KEY", `{"k": 1}`)
	t.Setenv("GOOGLE_STORAGE_TOKEN", "env-token")
	t.Setenv("OBJECT_STORE_CLIENT_MAX_RETRIES", "4")
	cfg, err = ParseGCSOptions(map[string]string{"google_storage_token": "option-token"})
	if err != nil || cfg.ServiceAccountKey != `{"k": 1}` || cfg.Token != "option-token" || cfg.Client.MaxRetries != 4 {
		t.Fatalf("%+v %v", cfg, err)
	}
	// pylance's OpenDAL backend has its own keys; they count only with
	// use_opendal=true, as in pylance.
	t.Setenv("GOOGLE_SERVICE_ACCOUNT_KEY", "")
	t.Setenv("GOOGLE_STORAGE_TOKEN", "")
	cred := base64.StdEncoding.EncodeToString([]byte(`{"disable_oauth": true}`))
	cfg, err = ParseGCSOptions(map[string]string{"use_opendal": "true", "endpoint": "http://127.0.0.1:1", "allow_anonymous": "true",
		"disable_vm_metadata": "true", "disable_config_load": "true", "credential": cred})
	if err != nil || cfg.BaseURL != "http://127.0.0.1:1" || !cfg.SkipSignature || cfg.ServiceAccountKey != `{"disable_oauth": true}` {
		t.Fatalf("OpenDAL keys: %+v %v", cfg, err)
	}
	for _, tc := range []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"endpoint": "secret-value"}, "only with use_opendal=true"},
		{map[string]string{"use_opendal": "false", "allow_anonymous": "true"}, "only with use_opendal=true"},
		{map[string]string{"service_acount": "secret-value"}, `"service_acount" is not a gs:// storage option (did you mean "service_account"?)`},
		{map[string]string{"aws_region": "secret-value"}, `"aws_region" is an option of s3:// stores, not gs://`},
		{map[string]string{"account_key": "secret-value"}, `"account_key" is an option of az:// stores, not gs://`},
		{map[string]string{"allow_http": "secret-value"}, "storage option allow_http is not a boolean"},
		{map[string]string{"timeout": "secret-value"}, "storage option timeout is not a duration"},
		{map[string]string{"service_account": "/a", "service_account_key": "secret-value"}, "keep one"},
	} {
		_, err := ParseGCSOptions(tc.opts)
		if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%v: %v", tc.opts, err)
		}
	}
}

// S3 takes every key pylance takes for it (those it does not need have no
// effect) and refuses the others.
func TestParseS3OptionsRefusesUnknownKeys(t *testing.T) {
	isolateEnv(t)
	if _, err := ParseS3Options(map[string]string{"AWS_Region": "eu-west-1", "role_arn": "arn", "aws_timeout": "5s",
		"client_max_retries": "2", "aws_request_payer": "true"}); err != nil {
		t.Fatal(err)
	}
	for opts, want := range map[string]string{
		"aws_secret_acess_key": `did you mean "aws_secret_access_key"?`,
		"account_key":          `"account_key" is an option of az:// stores, not s3://`,
		"google_storage_token": `"google_storage_token" is an option of gs:// stores, not s3://`,
	} {
		_, err := ParseS3Options(map[string]string{opts: "secret-value"})
		if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%s: %v", opts, err)
		}
	}
}

func TestParseAzureOptions(t *testing.T) {
	isolateEnv(t)
	key := base64.StdEncoding.EncodeToString([]byte("account-key-bytes"))
	cfg, err := ParseAzureOptions(map[string]string{"account_name": "acct", "AZURE_STORAGE_ACCOUNT_KEY": key,
		"azure_storage_sas_token": "sv=1&sig=abc", "bearer_token": "tok", "use_emulator": "true", "azure_allow_http": "true",
		"container_name": "ignored", "azure_client_id": "cid", "authority_id": "tid", "federated_token_file": "/f"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Account != "acct" || cfg.AccessKey != key || cfg.SASToken != "sv=1&sig=abc" || cfg.Token != "tok" || !cfg.UseEmulator ||
		!cfg.Client.AllowHTTP || cfg.ClientID != "cid" || cfg.TenantID != "tid" || cfg.FederatedTokenFile != "/f" {
		t.Fatalf("%+v", cfg)
	}
	t.Setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
	t.Setenv("AZURE_STORAGE_ALLOW_HTTP", "true")
	t.Setenv("IDENTITY_ENDPOINT", "http://127.0.0.1:1/msi")
	cfg, err = ParseAzureOptions(nil)
	if err != nil || cfg.Account != "envacct" || !cfg.Client.AllowHTTP || cfg.MSIEndpoint != "http://127.0.0.1:1/msi" {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, tc := range []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"account_key": "not base64 secret-value!"}, "is not base64"},
		{map[string]string{"acount_name": "secret-value"}, `did you mean "account_name"?`},
		{map[string]string{"service_account": "secret-value"}, `"service_account" is an option of gs:// stores, not az://`},
		{map[string]string{"use_emulator": "secret-value"}, "not a boolean"},
	} {
		_, err := ParseAzureOptions(tc.opts)
		if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%v: %v", tc.opts, err)
		}
	}
	if _, err := Open(context.Background(), "az://c/p", map[string]string{"account_name": "a", "fabric_session_token": "x"}); !errors.Is(err, errkind.Unsupported) {
		t.Fatalf("fabric token service: %v", err)
	}
}

func TestCloudPlainHTTPNeedsAllowHTTP(t *testing.T) {
	isolateEnv(t)
	if _, err := NewGCS("gs://b/p", GCSConfig{BaseURL: "http://127.0.0.1:1", SkipSignature: true}); !errors.Is(err, errkind.InvalidInput) ||
		!strings.Contains(err.Error(), "allow_http") {
		t.Fatalf("gcs: %v", err)
	}
	if _, err := NewAzure("az://c/p", AzureConfig{Account: "a", Endpoint: "http://127.0.0.1:1/a", SkipSignature: true}); !errors.Is(err, errkind.InvalidInput) ||
		!strings.Contains(err.Error(), "allow_http") {
		t.Fatalf("azure: %v", err)
	}
}

// Credentials never reach error messages: not through a failed
// connection, not when the service echoes them back.
func TestCloudErrorsHideSecrets(t *testing.T) {
	isolateEnv(t)
	ctx := context.Background()
	const token = "tok-SECRET-1234"
	sas := "sv=2019-12-12&sig=SIG-SECRET-5678"
	key := base64.StdEncoding.EncodeToString([]byte("KEY-SECRET-9012"))
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-error-code", "AuthenticationFailed")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "<Error><Code>AuthenticationFailed</Code><Message>you sent %s %s</Message></Error>", r.Header.Get("Authorization"), r.URL.RawQuery)
	}))
	defer echo.Close()
	client := ClientConfig{AllowHTTP: true, MaxRetries: -1}
	stores := map[string]func(base string) (Store, error){
		"gcs-token": func(base string) (Store, error) {
			return NewGCS("gs://b/p", GCSConfig{BaseURL: base, Token: token, Client: client})
		},
		"azure-sas": func(base string) (Store, error) {
			return NewAzure("az://c/p", AzureConfig{Account: "a", Endpoint: base + "/a", SASToken: sas, Client: client})
		},
		"azure-key": func(base string) (Store, error) {
			return NewAzure("az://c/p", AzureConfig{Account: "a", Endpoint: base + "/a", AccessKey: key, Client: client})
		},
		"azure-token": func(base string) (Store, error) {
			return NewAzure("az://c/p", AzureConfig{Account: "a", Endpoint: base + "/a", Token: token, Client: client})
		},
	}
	for name, open := range stores {
		for _, base := range []string{"http://127.0.0.1:1", echo.URL} {
			st, err := open(base)
			if err != nil {
				t.Fatal(err)
			}
			_, openErr := st.Open(ctx, "x")
			_, listErr := st.List(ctx, "")
			for _, err := range []error{openErr, listErr} {
				if err == nil {
					t.Fatalf("%s: no error", name)
				}
				for _, secret := range []string{token, "SIG-SECRET-5678", key} {
					if strings.Contains(err.Error(), secret) {
						t.Fatalf("%s via %s: secret in %q", name, base, err)
					}
				}
				if base == echo.URL && (!errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), "AuthenticationFailed")) {
					t.Fatalf("%s: %v", name, err)
				}
				if base != echo.URL && !errors.Is(err, errkind.IO) {
					t.Fatalf("%s: unreachable endpoint: %v", name, err)
				}
			}
		}
	}
}

func testRSAKey(t *testing.T, pkcs8 bool) (*rsa.PrivateKey, string) {
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if pkcs8 {
		der, _ := x509.MarshalPKCS8PrivateKey(key)
		return key, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

// fakeGCS answers object metadata requests whose bearer token check
// accepts.
func fakeGCS(t *testing.T, check func(bearer string) error) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			http.Error(w, `{"error":{"message":"no token"}}`, http.StatusUnauthorized)
			return
		}
		if err := check(tok); err != nil {
			http.Error(w, fmt.Sprintf(`{"error":{"message":%q}}`, err.Error()), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"name":"p/x","size":"3","updated":"2026-01-02T03:04:05Z"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// A service account signs its own JWT (RS256, the cloud-platform scope,
// one hour), reused until it nears expiry; gcs_base_url in the key file
// points the store at another endpoint, as object_store allows.
func TestGCSServiceAccountJWT(t *testing.T) {
	isolateEnv(t)
	for _, pkcs8 := range []bool{true, false} {
		key, pemKey := testRSAKey(t, pkcs8)
		var tokens []string
		srv, _ := fakeGCS(t, func(tok string) error {
			tokens = append(tokens, tok)
			parts := strings.Split(tok, ".")
			if len(parts) != 3 {
				return fmt.Errorf("not a JWT")
			}
			sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
			sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
			if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
				return err
			}
			var hdr map[string]string
			var claims map[string]any
			h, _ := base64.RawURLEncoding.DecodeString(parts[0])
			c, _ := base64.RawURLEncoding.DecodeString(parts[1])
			if json.Unmarshal(h, &hdr) != nil || json.Unmarshal(c, &claims) != nil {
				return fmt.Errorf("bad JWT JSON")
			}
			if hdr["alg"] != "RS256" || hdr["kid"] != "kid-1" || claims["iss"] != "sa@p.iam.gserviceaccount.com" ||
				claims["sub"] != claims["iss"] || claims["scope"] != gcsScope || claims["exp"].(float64)-claims["iat"].(float64) != 3600 {
				return fmt.Errorf("bad JWT: %v %v", hdr, claims)
			}
			return nil
		})
		sa, _ := json.Marshal(map[string]any{"type": "service_account", "private_key": pemKey, "private_key_id": "kid-1",
			"client_email": "sa@p.iam.gserviceaccount.com", "gcs_base_url": srv.URL})
		st, err := Open(context.Background(), "gs://b/p", map[string]string{"service_account_key": string(sa), "allow_http": "true"})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if e, err := st.Stat(context.Background(), "x"); err != nil || e.Size != 3 {
				t.Fatalf("pkcs8=%v: %+v %v", pkcs8, e, err)
			}
		}
		if len(tokens) != 3 || tokens[0] != tokens[2] {
			t.Fatalf("the token was not reused: %d tokens", len(tokens))
		}
	}
	// A key that cannot be used is refused when the store opens.
	for name, sa := range map[string]string{
		"no key":    `{"type":"service_account","private_key":"","private_key_id":"k","client_email":"e"}`,
		"bad PEM":   `{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n","client_email":"e"}`,
		"not JSON":  `{"private_key": "-----BEGIN`,
		"no e-mail": fmt.Sprintf(`{"private_key":%q}`, func() string { _, p := testRSAKey(t, true); return p }()),
	} {
		_, err := Open(context.Background(), "gs://b/p", map[string]string{"service_account_key": sa})
		if !errors.Is(err, errkind.InvalidInput) || strings.Contains(err.Error(), "BEGIN") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	_, err := Open(context.Background(), "gs://b/p", map[string]string{"service_account": filepath.Join(t.TempDir(), "missing.json")})
	if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("missing file: %v", err)
	}
}

// Application default credentials of a gcloud user: the refresh token is
// exchanged once, its access token reused; a refused refresh is a
// credentials error without the secrets.
func TestGCSAuthorizedUser(t *testing.T) {
	isolateEnv(t)
	var exchanges atomic.Int32
	refuse := false
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		r.ParseForm()
		if refuse || r.Form.Get("grant_type") != "refresh_token" || r.Form.Get("client_id") != "cid" ||
			r.Form.Get("client_secret") != "csecret-XYZ" || r.Form.Get("refresh_token") != "rtoken-XYZ" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant","message":"bad refresh_token rtoken-XYZ"}`)
			return
		}
		fmt.Fprint(w, `{"access_token":"at-1","expires_in":3599,"token_type":"Bearer"}`)
	}))
	defer tokenSrv.Close()
	old := gcsRefreshTokenURL
	gcsRefreshTokenURL = tokenSrv.URL + "/token"
	t.Cleanup(func() { gcsRefreshTokenURL = old })
	srv, calls := fakeGCS(t, func(tok string) error {
		if tok != "at-1" {
			return fmt.Errorf("token %q", tok)
		}
		return nil
	})
	adc := filepath.Join(t.TempDir(), "adc.json")
	os.WriteFile(adc, []byte(`{"type":"authorized_user","client_id":"cid","client_secret":"csecret-XYZ","refresh_token":"rtoken-XYZ"}`), 0o600)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", adc)
	st, err := NewGCS("gs://b/p", GCSConfig{BaseURL: srv.URL, ApplicationCredentials: adc, Client: ClientConfig{AllowHTTP: true}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := st.Stat(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if exchanges.Load() != 1 || calls.Load() != 3 {
		t.Fatalf("%d exchanges for %d calls", exchanges.Load(), calls.Load())
	}
	// The environment variable alone finds the file, as in pylance.
	cfg, err := ParseGCSOptions(map[string]string{"allow_http": "true"})
	if err != nil || cfg.ApplicationCredentials != adc {
		t.Fatalf("%+v %v", cfg, err)
	}
	refuse = true
	st, _ = NewGCS("gs://b/p", GCSConfig{BaseURL: srv.URL, ApplicationCredentials: adc, Client: ClientConfig{AllowHTTP: true}})
	_, err = st.Stat(context.Background(), "x")
	if !errors.Is(err, errkind.InvalidInput) || strings.Contains(err.Error(), "XYZ") || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("refused refresh: %v", err)
	}
}

// Without credentials, the machine's metadata server (GCE_METADATA_HOST)
// gives the token; without one, the error says what to set.
func TestGCSMetadataServer(t *testing.T) {
	isolateEnv(t)
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" || r.URL.Path != "/computeMetadata/v1/instance/service-accounts/default/token" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		fmt.Fprint(w, `{"access_token":"md-token","expires_in":3599}`)
	}))
	defer md.Close()
	srv, _ := fakeGCS(t, func(tok string) error {
		if tok != "md-token" {
			return fmt.Errorf("token %q", tok)
		}
		return nil
	})
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(md.URL, "http://"))
	st, err := NewGCS("gs://b/p", GCSConfig{BaseURL: srv.URL, Client: ClientConfig{AllowHTTP: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Stat(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	st, _ = NewGCS("gs://b/p", GCSConfig{BaseURL: srv.URL, Client: ClientConfig{AllowHTTP: true, MaxRetries: -1}})
	if _, err := st.Stat(context.Background(), "x"); !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), "service_account") {
		t.Fatalf("no credentials: %v", err)
	}
}

// fakeBlob answers Get Blob Properties when the bearer token is want.
func fakeBlob(t *testing.T, want string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+want || r.Header.Get("x-ms-version") == "" {
			w.Header().Set("x-ms-error-code", "AuthenticationFailed")
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Length", "3")
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2026 03:04:05 GMT")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Microsoft Entra ID tokens: a service principal's secret, a workload
// identity's federated token, a managed identity endpoint.
func TestAzureEntraTokens(t *testing.T) {
	isolateEnv(t)
	fed := filepath.Join(t.TempDir(), "token")
	os.WriteFile(fed, []byte("federated-jwt\n"), 0o600)
	entra := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		f := r.Form
		ok := r.URL.Path == "/tenant-1/oauth2/v2.0/token" && f.Get("client_id") == "app-1" && f.Get("grant_type") == "client_credentials" &&
			f.Get("scope") == "https://storage.azure.com/.default"
		switch {
		case ok && f.Get("client_secret") == "app-secret":
			fmt.Fprint(w, `{"access_token":"sp-token","expires_in":3599}`)
		case ok && f.Get("client_assertion") == "federated-jwt" && f.Get("client_assertion_type") == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
			fmt.Fprint(w, `{"access_token":"wi-token","expires_in":"3599"}`)
		default:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
		}
	}))
	defer entra.Close()
	msi := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("Metadata") != "true" || q.Get("resource") != "https://storage.azure.com" || q.Get("client_id") != "mi-1" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"access_token":"mi-token","expires_on":"%d"}`, time.Now().Add(time.Hour).Unix())
	}))
	defer msi.Close()
	for _, tc := range []struct {
		name  string
		opts  map[string]string
		token string
	}{
		{"service principal", map[string]string{"client_id": "app-1", "client_secret": "app-secret", "tenant_id": "tenant-1", "authority_host": entra.URL}, "sp-token"},
		{"workload identity", map[string]string{"azure_client_id": "app-1", "azure_tenant_id": "tenant-1", "azure_federated_token_file": fed, "authority_host": entra.URL}, "wi-token"},
		{"managed identity", map[string]string{"client_id": "mi-1", "msi_endpoint": msi.URL + "/metadata/identity/oauth2/token"}, "mi-token"},
	} {
		blob := fakeBlob(t, tc.token)
		opts := map[string]string{"account_name": "acct", "endpoint": blob.URL + "/acct", "allow_http": "true"}
		for k, v := range tc.opts {
			opts[k] = v
		}
		st, err := Open(context.Background(), "az://c/p", opts)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := st.Stat(context.Background(), "x"); err != nil || e.Size != 3 {
			t.Fatalf("%s: %+v %v", tc.name, e, err)
		}
	}
	blob := fakeBlob(t, "never")
	st, _ := Open(context.Background(), "az://c/p", map[string]string{"account_name": "acct", "endpoint": blob.URL + "/acct", "allow_http": "true",
		"client_id": "app-1", "client_secret": "wrong-secret", "tenant_id": "tenant-1", "authority_host": entra.URL})
	if _, err := st.Stat(context.Background(), "x"); !errors.Is(err, errkind.InvalidInput) || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("refused secret: %v", err)
	}
}

// A SAS token Azurite signed for us (an account SAS over the well-known
// key) authorizes every operation; use_emulator finds Azurite through
// AZURITE_BLOB_STORAGE_URL with its default account and key.
func TestAzureSASAndEmulatorDefaults(t *testing.T) {
	az := cloudtest.AzureBlob(t)
	ctx := context.Background()
	expiry := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04:05Z")
	toSign := strings.Join([]string{az.Account, "rwdlac", "b", "sco", "", expiry, "", "https,http", "2019-12-12", ""}, "\n")
	key, _ := base64.StdEncoding.DecodeString(az.Key)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(toSign))
	sas := url.Values{"sv": {"2019-12-12"}, "ss": {"b"}, "srt": {"sco"}, "sp": {"rwdlac"}, "se": {expiry}, "spr": {"https,http"},
		"sig": {base64.StdEncoding.EncodeToString(mac.Sum(nil))}}.Encode()
	prefix := cloudtest.Prefix()
	st, err := Open(ctx, "az://"+az.Container+"/"+prefix, map[string]string{"account_name": az.Account, "sas_token": "?" + sas,
		"endpoint": az.AccountURL(), "allow_http": "true"})
	if err != nil {
		t.Fatal(err)
	}
	checkContract(t, st)
	t.Setenv("AZURITE_BLOB_STORAGE_URL", az.Endpoint)
	emu, err := Open(ctx, "az://"+az.Container+"/"+prefix, map[string]string{"use_emulator": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ReadAll(ctx, emu, "_versions/1.manifest", 10); err != nil || string(got) != "v1" {
		t.Fatalf("use_emulator: %q %v", got, err)
	}
	bad := strings.Replace(sas, "sp=rwdlac", "sp=r", 1)
	ro, _ := Open(ctx, "az://"+az.Container+"/"+prefix, map[string]string{"account_name": az.Account, "sas_token": bad,
		"endpoint": az.AccountURL(), "allow_http": "true", "max_retries": "0"})
	if err := Put(ctx, ro, "y", []byte("y")); !errors.Is(err, errkind.InvalidInput) || strings.Contains(err.Error(), "sig=") {
		t.Fatalf("a SAS whose signature does not match: %v", err)
	}
}

// Accounts with a hierarchical namespace list directories as empty blobs;
// they are not objects.
func TestAzureListSkipsDirectories(t *testing.T) {
	isolateEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("include") != "metadata" {
			http.Error(w, "no metadata", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>
<Blob><Name>p/_indices</Name><Properties><Content-Length>0</Content-Length><ResourceType>directory</ResourceType></Properties></Blob>
<Blob><Name>p/_indices/u</Name><Properties><Content-Length>0</Content-Length></Properties><Metadata><hdi_isfolder>true</hdi_isfolder></Metadata></Blob>
<Blob><Name>p/_indices/u/index.idx</Name><Properties><Last-Modified>Mon, 02 Jan 2026 03:04:05 GMT</Last-Modified><Content-Length>7</Content-Length><ResourceType>file</ResourceType></Properties></Blob>
</Blobs><NextMarker/></EnumerationResults>`)
	}))
	defer srv.Close()
	st, err := NewAzure("az://c/p", AzureConfig{Account: "a", Endpoint: srv.URL + "/a", SkipSignature: true, Client: ClientConfig{AllowHTTP: true}})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := st.List(context.Background(), "")
	if err != nil || len(entries) != 1 || entries[0].Name != "_indices/u/index.idx" || entries[0].Size != 7 || entries[0].ModTime.IsZero() {
		t.Fatalf("%+v %v", entries, err)
	}
}
