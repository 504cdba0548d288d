package testsvc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Certs is a throw-away certificate authority for TLS tests: a CA and the
// certificates it issues (ECDSA P-256), written as PEM files to a test's
// temporary directory.
type Certs struct {
	// Dir holds the files; CAFile is the CA certificate (PEM), what a
	// broker's client_ca_file and a client's --tls-ca name.
	Dir    string
	CAFile string

	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial atomic.Int64
}

// NewCerts makes a CA in t.TempDir().
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c := &Certs{Dir: t.TempDir()}
	c.serial.Store(time.Now().UnixNano() & 0xFFFFFFFF)
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(c.serial.Add(1)),
		Subject:               pkix.Name{CommonName: "metaq-go test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	c.caKey = key
	c.CAFile = filepath.Join(c.Dir, "ca.pem")
	writePEM(t, c.CAFile, "CERTIFICATE", der)
	return c
}

// Pool returns a pool holding the CA.
func (c *Certs) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca)
	return p
}

// Server issues a server certificate for 127.0.0.1 and localhost, written
// as <name>.pem and <name>-key.pem. It returns the files and the serial.
func (c *Certs) Server(t testing.TB, name string) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	return c.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Client issues a client certificate whose Subject CN is cn, written as
// <name>.pem and <name>-key.pem.
func (c *Certs) Client(t testing.TB, name, cn string) (certFile, keyFile string) {
	t.Helper()
	cf, kf, _ := c.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return cf, kf
}

// ClientConfig returns a client tls.Config that trusts the CA and, when cn
// is not empty, presents a client certificate with that CN.
func (c *Certs) ClientConfig(t testing.TB, cn string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: c.Pool(), ServerName: "127.0.0.1"}
	if cn != "" {
		cf, kf := c.Client(t, "client-"+cn, cn)
		cert, err := tls.LoadX509KeyPair(cf, kf)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func (c *Certs) issue(t testing.TB, name string, tmpl *x509.Certificate) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(c.serial.Add(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(c.Dir, name+".pem")
	keyFile = filepath.Join(c.Dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile, tmpl.SerialNumber
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writePEM writes one PEM block atomically (a rename), so that a broker
// reloading on SIGHUP never reads half a file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
