// Package cloudtest supports tests against the local GCS and Azure Blob
// emulators (fake-gcs-server and Azurite, started by
// tools/with_emulators.py): where they are, and fresh names on them. The
// fault-injecting proxy is s3test.FaultProxy, the same for every store.
package cloudtest

import (
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func endpoint(t testing.TB, store, env string) string {
	t.Helper()
	if why := os.Getenv("SEGMERGE_" + store + "_SKIP"); why != "" {
		t.Skip(why)
	}
	ep := os.Getenv(env)
	if ep == "" {
		t.Skip(env + " is not set (run through tools/with_emulators.py)")
	}
	return ep
}

// GCS returns fake-gcs-server's base URL and a bucket on it, or skips the
// test.
func GCS(t testing.TB) (baseURL, bucket string) {
	ep := endpoint(t, "GCS", "SEGMERGE_GCS_ENDPOINT")
	return ep, os.Getenv("SEGMERGE_GCS_BUCKET")
}

// Azure is Azurite's blob service: its URL, the well-known account and key,
// and a container on it.
type Azure struct {
	Endpoint, Account, Key, Container string
}

// AccountURL is the blob endpoint of the account (path-style).
func (a Azure) AccountURL() string { return strings.TrimRight(a.Endpoint, "/") + "/" + a.Account }

// AzureBlob returns Azurite's settings, or skips the test.
func AzureBlob(t testing.TB) Azure {
	ep := endpoint(t, "AZURE", "SEGMERGE_AZURE_ENDPOINT")
	return Azure{Endpoint: ep, Account: "devstoreaccount1",
		// Azurite's documented well-known key, not a secret.
		Key:       "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
		Container: os.Getenv("SEGMERGE_AZURE_CONTAINER")}
}

// Prefix is a fresh path prefix, so that tests sharing a bucket or a
// container never see each other's objects.
func Prefix() string { return "t-" + uuid.NewString()[:13] }
