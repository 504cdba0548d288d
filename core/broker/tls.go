package broker

import (
	"sync"

	"github.com/metaq-go/metaq/core/security"
)

// ReloadTLS reads [tls] cert_file, key_file and client_ca_file again (the
// server's SIGHUP). New handshakes use the new material; established
// connections keep theirs. On error nothing changes.
func (b *Broker) ReloadTLS() error {
	if b.tls == nil {
		return security.ErrNoTLS
	}
	return b.tls.Reload()
}

// copyBufs are the buffers value replies over TLS are read into
// (security.HeldConn: no sendfile through TLS; store.Sender copies
// through them).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, security.HeldMax); return &b }}
