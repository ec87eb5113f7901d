package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Azure is a Store over a prefix of an Azure Blob Storage container,
// spoken to through the Blob REST API over plain net/http (see rest.go
// for retries).
//
// Reads are ranged GETs; an object larger than one part goes up as
// blocks (Put Block, several in flight) committed by Put Block List, a
// smaller one as one Put Blob; PutIfAbsent is Put Blob with
// If-None-Match: *, which the service refuses (409/412) when the blob
// exists: the precondition pylance (object_store) commits with. Blocks of
// an aborted upload are never committed and the service drops them.
type Azure struct {
	c          *rest
	account    string
	accountURL string // "https://acct.blob.core.windows.net" or an emulator's ".../devstoreaccount1"
	container  string
	prefix     string // "" or ending in "/"
	uri        string
	part       int
	inflight   int
}

// azureVersion is the Blob service REST version we speak (supported by
// Azurite since 3.29).
const azureVersion = "2023-11-03"

// The emulator's well-known account and key (Azurite's documented
// defaults, as object_store uses them).
const (
	azureEmulatorAccount = "devstoreaccount1"
	azureEmulatorKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzureConfig is what an Azure store needs; ParseAzureOptions builds it
// from pylance's storage options. The zero value of every field means its
// default.
type AzureConfig struct {
	Account string
	// Endpoint is the account URL; default https://<account>.blob.core.windows.net
	// (blob.fabric.microsoft.com with UseFabricEndpoint).
	Endpoint string
	// UseEmulator talks to Azurite at $AZURITE_BLOB_STORAGE_URL (default
	// http://127.0.0.1:10000), account devstoreaccount1 and its well-known
	// key unless others are given.
	UseEmulator       bool
	UseFabricEndpoint bool
	// Credentials, tried in object_store's order: a bearer Token, an account
	// AccessKey (Shared Key signing), workload identity (ClientID, TenantID,
	// FederatedTokenFile), a service principal (ClientID, ClientSecret,
	// TenantID), a SAS token, the Azure CLI, managed identity (IMDS, or
	// MSIEndpoint). SkipSignature sends none.
	Token              string
	AccessKey          string
	SASToken           string
	ClientID           string
	ClientSecret       string
	TenantID           string
	AuthorityHost      string
	FederatedTokenFile string
	UseAzureCLI        bool
	MSIEndpoint        string
	ObjectID           string
	MSIResourceID      string
	SkipSignature      bool
	fabricToken        bool // fabric token service settings were given
	Client             ClientConfig
	// PartBytes is the block size. Default 16 MiB.
	PartBytes int
	// UploadConcurrency bounds the blocks of one blob in flight. Default 4.
	UploadConcurrency int
}

var azureOptions = optionTable{scheme: "az", prefix: "azure_", keys: map[string]string{
	"azure_storage_account_key": "access_key", "azure_storage_access_key": "access_key", "azure_storage_master_key": "access_key",
	"master_key": "access_key", "account_key": "access_key", "access_key": "access_key",
	"azure_storage_account_name": "account_name", "account_name": "account_name",
	"azure_storage_client_id": "client_id", "azure_client_id": "client_id", "client_id": "client_id",
	"azure_storage_client_secret": "client_secret", "azure_client_secret": "client_secret", "client_secret": "client_secret",
	"azure_storage_tenant_id": "tenant_id", "azure_storage_authority_id": "tenant_id", "azure_tenant_id": "tenant_id",
	"azure_authority_id": "tenant_id", "tenant_id": "tenant_id", "authority_id": "tenant_id",
	"azure_storage_authority_host": "authority_host", "azure_authority_host": "authority_host", "authority_host": "authority_host",
	"azure_storage_sas_key": "sas", "azure_storage_sas_token": "sas", "sas_key": "sas", "sas_token": "sas",
	"azure_storage_token": "token", "bearer_token": "token", "token": "token",
	"azure_storage_use_emulator": "use_emulator", "use_emulator": "use_emulator",
	"azure_storage_endpoint": "endpoint", "azure_endpoint": "endpoint", "endpoint": "endpoint",
	"azure_msi_endpoint": "msi_endpoint", "azure_identity_endpoint": "msi_endpoint", "identity_endpoint": "msi_endpoint", "msi_endpoint": "msi_endpoint",
	"azure_object_id": "object_id", "object_id": "object_id",
	"azure_msi_resource_id": "msi_resource_id", "msi_resource_id": "msi_resource_id",
	"azure_federated_token_file": "federated_token_file", "federated_token_file": "federated_token_file",
	"azure_use_fabric_endpoint": "use_fabric_endpoint", "use_fabric_endpoint": "use_fabric_endpoint",
	"azure_use_azure_cli": "use_azure_cli", "use_azure_cli": "use_azure_cli",
	"azure_skip_signature": "skip_signature", "skip_signature": "skip_signature",
	"azure_container_name": "", "container_name": "",
	"azure_disable_tagging": "", "disable_tagging": "",
	"azure_fabric_token_service_url": "fabric", "fabric_token_service_url": "fabric",
	"azure_fabric_workload_host": "fabric", "fabric_workload_host": "fabric",
	"azure_fabric_session_token": "fabric", "fabric_session_token": "fabric",
	"azure_fabric_cluster_identifier": "fabric", "fabric_cluster_identifier": "fabric",
	"azure_allow_http": "allow_http",
}}

// ParseAzureOptions builds an AzureConfig from pylance-style storage
// options, with pylance's environment fallbacks (AZURE_STORAGE_ACCOUNT_NAME,
// AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_CLIENT_ID, ...,
// AZURE_STORAGE_ALLOW_HTTP, IDENTITY_ENDPOINT). Unknown keys and malformed
// values are errkind.InvalidInput.
func ParseAzureOptions(options map[string]string) (AzureConfig, error) {
	r, err := azureOptions.resolve(options, map[string]string{
		"AZURE_STORAGE_ALLOW_HTTP": "allow_http", "AZURE_STORAGE_USE_HTTP": "allow_http", "IDENTITY_ENDPOINT": "msi_endpoint",
	})
	if err != nil {
		return AzureConfig{}, err
	}
	var errs []error
	cfg := AzureConfig{
		Account: r.get("account_name"), Endpoint: r.get("endpoint"),
		UseEmulator: r.boolean("use_emulator", &errs), UseFabricEndpoint: r.boolean("use_fabric_endpoint", &errs),
		Token: r.get("token"), AccessKey: r.get("access_key"), SASToken: r.get("sas"),
		ClientID: r.get("client_id"), ClientSecret: r.get("client_secret"), TenantID: r.get("tenant_id"),
		AuthorityHost: r.get("authority_host"), FederatedTokenFile: r.get("federated_token_file"),
		UseAzureCLI: r.boolean("use_azure_cli", &errs), MSIEndpoint: r.get("msi_endpoint"),
		ObjectID: r.get("object_id"), MSIResourceID: r.get("msi_resource_id"),
		SkipSignature: r.boolean("skip_signature", &errs), fabricToken: r.has("fabric"),
		Client: r.client(&errs),
	}
	if cfg.AccessKey != "" {
		if _, err := base64.StdEncoding.DecodeString(cfg.AccessKey); err != nil {
			errs = append(errs, fmt.Errorf("%w: storage: the Azure account key (%s) is not base64", errkind.InvalidInput, r.src["access_key"]))
		}
	}
	if len(errs) > 0 {
		return AzureConfig{}, joinErrors(errs)
	}
	return cfg, nil
}

// parseAzureURI reads az://container/path and
// az://container@account.dfs.core.windows.net/path (object_store's forms).
func parseAzureURI(uri string) (container, account, prefix string, fabric bool, err error) {
	bad := fmt.Errorf("%w: storage: bad Azure URI %q (want az://container/path or az://container@account.dfs.core.windows.net/path)",
		errkind.InvalidInput, redactURL(uri))
	u, perr := url.Parse(uri)
	if perr != nil || u.Host == "" {
		return "", "", "", false, bad
	}
	host := u.Hostname()
	if u.User == nil {
		container = host
	} else {
		container = u.User.Username()
		if _, hasPassword := u.User.Password(); hasPassword {
			return "", "", "", false, bad
		}
		switch {
		case strings.HasSuffix(host, ".dfs.core.windows.net"):
			account = strings.TrimSuffix(host, ".dfs.core.windows.net")
		case strings.HasSuffix(host, ".dfs.fabric.microsoft.com"):
			account, fabric = strings.TrimSuffix(host, ".dfs.fabric.microsoft.com"), true
		default:
			return "", "", "", false, bad
		}
		if account == "" || strings.Contains(account, ".") {
			return "", "", "", false, bad
		}
	}
	if container == "" || strings.Contains(container, ".") {
		return "", "", "", false, bad
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return container, account, prefix, fabric, nil
}

// NewAzure opens the store at az://container/prefix. Credentials are read
// and checked here; tokens are fetched on first use.
func NewAzure(uri string, cfg AzureConfig) (*Azure, error) {
	container, account, prefix, fabric, err := parseAzureURI(uri)
	if err != nil {
		return nil, err
	}
	if account == "" {
		account = cfg.Account
	}
	cfg.UseFabricEndpoint = cfg.UseFabricEndpoint || fabric
	if cfg.UseEmulator {
		if account == "" {
			account = azureEmulatorAccount
		}
		cfg.Client.AllowHTTP = true
	}
	if account == "" {
		return nil, fmt.Errorf("%w: storage: no Azure storage account: set account_name (or AZURE_STORAGE_ACCOUNT_NAME), or use az://container@account.dfs.core.windows.net/path",
			errkind.InvalidInput)
	}
	accountURL := cfg.Endpoint
	switch {
	case cfg.UseEmulator:
		base := getenv("AZURITE_BLOB_STORAGE_URL")
		if base == "" {
			base = "http://127.0.0.1:10000"
		}
		accountURL = strings.TrimRight(base, "/") + "/" + account
	case accountURL != "":
	case cfg.UseFabricEndpoint:
		accountURL = "https://" + account + ".blob.fabric.microsoft.com"
	default:
		accountURL = "https://" + account + ".blob.core.windows.net"
	}
	sec := &secrets{}
	c, err := newREST("azure", cfg.Client, sec)
	if err != nil {
		return nil, err
	}
	accountURL = strings.TrimRight(accountURL, "/")
	if err := c.checkScheme(accountURL); err != nil {
		return nil, err
	}
	auth, err := azureCredentials(cfg, account, sec)
	if err != nil {
		return nil, err
	}
	c.auth = auth(c)
	part := cfg.PartBytes
	if part <= 0 {
		part = 16 << 20
	}
	inflight := cfg.UploadConcurrency
	if inflight <= 0 {
		inflight = 4
	}
	return &Azure{c: c, account: account, accountURL: accountURL, container: container, prefix: prefix,
		uri: uri, part: part, inflight: inflight}, nil
}

func (s *Azure) URI() string { return s.uri }

// Sync does nothing: a committed blob is durable.
func (s *Azure) Sync(ctx context.Context, names []string) error { return nil }

func (s *Azure) key(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return s.prefix + name, nil
}

func (s *Azure) blobURL(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return s.accountURL + "/" + url.PathEscape(s.container) + "/" + strings.Join(parts, "/")
}

func (s *Azure) Stat(ctx context.Context, name string) (Entry, error) {
	key, err := s.key(name)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	err = s.c.do(ctx, "stat", name, newRequest(http.MethodHead, s.blobURL(key), nil), func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK {
			return s.c.statusError("stat", name, resp)
		}
		n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: storage: azure stat %s: no Content-Length", errkind.IO, name)
		}
		e = Entry{Name: name, Size: n, ETag: resp.Header.Get("ETag")}
		e.ModTime, _ = http.ParseTime(resp.Header.Get("Last-Modified"))
		return nil
	})
	return e, err
}

// Concurrency asks callers for RemoteConcurrency requests in flight.
func (s *Azure) Concurrency() int { return RemoteConcurrency }

func (s *Azure) Open(ctx context.Context, name string) (Object, error) {
	e, err := s.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	key, _ := s.key(name)
	u := s.blobURL(key)
	return &restObject{name: name, id: restIdentity("az", u, e), blockSource: blockSource{size: e.Size, read: func(ctx context.Context, p []byte, off int64) error {
		mk := func() (*http.Request, error) {
			r, err := newRequest(http.MethodGet, u, nil)()
			if err == nil {
				r.Header.Set("x-ms-range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
			}
			return r, err
		}
		return s.c.do(ctx, "read", name, mk, func(resp *http.Response) error {
			if resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK {
				return s.c.statusError("read", name, resp)
			}
			return readRangeBody(resp, p, off)
		})
	}}}, nil
}

// azureList is the part of List Blobs' answer we read.
type azureList struct {
	Blobs []struct {
		Name       string `xml:"Name"`
		Properties struct {
			LastModified  string `xml:"Last-Modified"`
			ContentLength int64  `xml:"Content-Length"`
			ResourceType  string `xml:"ResourceType"`
		} `xml:"Properties"`
		Metadata struct {
			IsFolder string `xml:"hdi_isfolder"`
		} `xml:"Metadata"`
	} `xml:"Blobs>Blob"`
	NextMarker string `xml:"NextMarker"`
}

func (s *Azure) List(ctx context.Context, prefix string) ([]Entry, error) {
	var out []Entry
	marker := ""
	for {
		q := url.Values{"restype": {"container"}, "comp": {"list"}, "prefix": {s.prefix + prefix},
			"maxresults": {strconv.Itoa(listPageSize)}, "include": {"metadata"}}
		if marker != "" {
			q.Set("marker", marker)
		}
		u := s.accountURL + "/" + url.PathEscape(s.container) + "?" + q.Encode()
		var page azureList
		err := s.c.do(ctx, "list", prefix, newRequest(http.MethodGet, u, nil), func(resp *http.Response) error {
			if resp.StatusCode != http.StatusOK {
				return s.c.statusError("list", prefix, resp)
			}
			page = azureList{}
			if err := xml.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page); err != nil {
				return errRetry{fmt.Errorf("decoding the answer: %w", err)}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, b := range page.Blobs {
			// Directories of accounts with a hierarchical namespace (ADLS
			// Gen2) are listed as empty blobs; they hold no data.
			if b.Properties.ResourceType == "directory" || strings.EqualFold(b.Metadata.IsFolder, "true") {
				continue
			}
			e := Entry{Name: strings.TrimPrefix(b.Name, s.prefix), Size: b.Properties.ContentLength}
			e.ModTime, _ = http.ParseTime(b.Properties.LastModified)
			out = append(out, e)
		}
		if page.NextMarker == "" || page.NextMarker == marker {
			break
		}
		marker = page.NextMarker
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Azure) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	return s.c.delete(ctx, name, s.blobURL(key))
}

// putBlob writes a whole blob in one request; ifAbsent adds
// If-None-Match: *.
func (s *Azure) putBlob(ctx context.Context, op, name, key string, data []byte, ifAbsent bool) error {
	mk := func() (*http.Request, error) {
		r, err := newRequest(http.MethodPut, s.blobURL(key), data)()
		if err != nil {
			return nil, err
		}
		r.Header.Set("x-ms-blob-type", "BlockBlob")
		if ifAbsent {
			r.Header.Set("If-None-Match", "*")
		}
		return r, nil
	}
	return s.c.do(ctx, op, name, mk, func(resp *http.Response) error {
		if resp.StatusCode/100 == 2 {
			return nil
		}
		return s.c.statusError(op, name, resp)
	})
}

// PutIfAbsent is Put Blob with If-None-Match: *. A refusal after a retried
// request may be our own first attempt: read it back and compare.
func (s *Azure) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	err = s.putBlob(ctx, "publish", name, key, data, true)
	if errkind.Tag(err) == "conflict" {
		if sameContent(ctx, s, name, data) {
			return nil
		}
		return fmt.Errorf("%w: storage: azure publish %s: already exists", errkind.Conflict, name)
	}
	return err
}

// Create buffers one block; a larger blob goes up as blocks (at most
// UploadConcurrency in flight) while the caller keeps writing, and Finish
// commits the block list. Abort commits nothing.
func (s *Azure) Create(ctx context.Context, name string) (Writer, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &azureWriter{s: s, ctx: ctx, cancel: cancel, name: name, key: key,
		idPrefix: strings.ReplaceAll(uuid.NewString(), "-", "")[:16], sem: make(chan struct{}, s.inflight)}, nil
}

type azureWriter struct {
	s        *Azure
	ctx      context.Context
	cancel   context.CancelFunc
	name     string
	key      string
	idPrefix string // block ids of this writer: prefix + number, all the same length
	buf      []byte
	ids      []string
	wg       sync.WaitGroup
	mu       sync.Mutex
	err      error
	sem      chan struct{}
	done     bool
}

func (w *azureWriter) setErr(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *azureWriter) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *azureWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: %s: Write after Finish or Abort", w.name)
	}
	if err := w.firstErr(); err != nil {
		return 0, err
	}
	w.buf = append(w.buf, p...)
	for len(w.buf) >= w.s.part {
		block := w.buf[:w.s.part:w.s.part]
		w.buf = append(make([]byte, 0, w.s.part), w.buf[w.s.part:]...)
		if err := w.putBlock(block); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *azureWriter) putBlock(block []byte) error {
	id := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%s%08d", w.idPrefix, len(w.ids))))
	w.ids = append(w.ids, id)
	select {
	case w.sem <- struct{}{}:
	case <-w.ctx.Done():
		if err := w.firstErr(); err != nil {
			return err
		}
		return fmt.Errorf("storage: azure write %s: %w", w.name, w.ctx.Err())
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		u := w.s.blobURL(w.key) + "?comp=block&blockid=" + url.QueryEscape(id)
		op := fmt.Sprintf("upload block %d of", len(w.ids))
		err := w.s.c.do(w.ctx, op, w.name, newRequest(http.MethodPut, u, block), func(resp *http.Response) error {
			if resp.StatusCode/100 == 2 {
				return nil
			}
			return w.s.c.statusError(op, w.name, resp)
		})
		if err != nil {
			w.setErr(err)
			w.cancel()
		}
	}()
	return nil
}

func (w *azureWriter) Finish() error {
	if w.done {
		return fmt.Errorf("storage: %s: Finish after Finish or Abort", w.name)
	}
	w.done = true
	defer w.cancel()
	if len(w.ids) == 0 {
		if err := w.firstErr(); err != nil {
			return err
		}
		return w.s.putBlob(w.ctx, "write", w.name, w.key, w.buf, false)
	}
	if len(w.buf) > 0 {
		if err := w.putBlock(w.buf); err != nil {
			w.cancel()
			w.wg.Wait()
			return err
		}
	}
	w.wg.Wait()
	if err := w.firstErr(); err != nil {
		return err
	}
	var list bytes.Buffer
	list.WriteString(`<?xml version="1.0" encoding="utf-8"?><BlockList>`)
	for _, id := range w.ids {
		list.WriteString("<Latest>" + id + "</Latest>")
	}
	list.WriteString("</BlockList>")
	u := w.s.blobURL(w.key) + "?comp=blocklist"
	return w.s.c.do(w.ctx, "commit blocks of", w.name, newRequest(http.MethodPut, u, list.Bytes()), func(resp *http.Response) error {
		if resp.StatusCode/100 == 2 {
			return nil
		}
		return w.s.c.statusError("commit blocks of", w.name, resp)
	})
}

// Abort stops the uploads; uncommitted blocks never become a blob, and the
// service discards them (after a week at the latest).
func (w *azureWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.cancel()
	w.wg.Wait()
}
