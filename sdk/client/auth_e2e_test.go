package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestTLSAndSASLPlain runs a producer, a consumer and an admin over TLS
// with SASL PLAIN against a broker with auth on, then checks the errors of
// a wrong password and of no credentials.
func TestTLSAndSASLPlain(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	b := brokertest.Start(t, brokertest.Config(brokerConfig(t)), brokertest.Quiet(), brokertest.TLSOnly(),
		brokertest.TLS(conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}),
		brokertest.Auth(conf.Auth{Enabled: true, FailureDelay: 50, Users: []conf.User{{Name: "app", PasswordHash: string(hash),
			Publish: []string{topic}, Subscribe: []string{topic}, Groups: []string{"*"}}}}))
	addr := b.TLSAddr()
	secure := []connOption{withTLS(certs.ClientConfig(t, "")), withSASLPlain("app", "s3cret")}

	p := newProducer(t, addr, secure[0], secure[1])
	for i := 0; i < 10; i++ {
		_, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("m")})
		require.NoError(t, err)
	}
	c := newConsumer(t, addr, secure[0], secure[1], withGroup("g"))
	require.Len(t, readN(t, c, 10), 10)
	adm, err := newBrokerAdmin(addr, secure[0], secure[1], quiet)
	require.NoError(t, err)
	defer adm.Close()
	_, err = adm.Stats(ctxT(t, 10*time.Second), "")
	require.NoError(t, err)

	// A topic the user has no right on is neither listed nor described
	// to them (core/security): sending to it fails at once with the
	// broker's 403, as a refused put would, through the one-broker
	// producer and through a Client.
	t.Run("no right on the topic", func(t *testing.T) {
		const denial = `user "app" may not see topic "secret" (it needs publish or subscribe)`
		start := time.Now()
		_, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: "secret", Body: []byte("m")})
		require.ErrorIs(t, err, ErrForbidden)
		require.ErrorContains(t, err, denial)
		cl, err := New(Brokers(addr), DialTLS(certs.ClientConfig(t, "")), SASLPlain("app", "s3cret"), Logger(spoolQuietLogger))
		require.NoError(t, err)
		defer cl.Close(context.Background())
		_, err = cl.ProduceSync(ctxT(t, 10*time.Second), &message.Message{Topic: "secret", Body: []byte("m")})
		require.ErrorIs(t, err, ErrForbidden)
		require.ErrorContains(t, err, denial)
		require.Less(t, time.Since(start), 8*time.Second, "refused, not timed out")
		_, err = cl.ProduceSync(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("m")})
		require.NoError(t, err, "its own topic still works")
	})
	t.Run("wrong password", func(t *testing.T) {
		p := newProducer(t, addr, secure[0], withSASLPlain("app", "guess"))
		_, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("m")})
		var ae *AuthError
		require.ErrorAs(t, err, &ae)
		require.ErrorIs(t, err, ErrUnauthorized)
		require.Equal(t, "app", ae.User)
		require.Contains(t, err.Error(), `user "app"`)
		require.NotContains(t, err.Error(), "guess")
	})
	t.Run("no credentials", func(t *testing.T) {
		adm, err := newBrokerAdmin(addr, secure[0], quiet)
		require.NoError(t, err)
		defer adm.Close()
		_, err = adm.Stats(ctxT(t, 10*time.Second), "")
		require.ErrorIs(t, err, ErrUnauthorized)
		require.False(t, errors.As(err, new(*AuthError)))
	})
	t.Run("no TLS", func(t *testing.T) {
		adm, err := newBrokerAdmin(addr, secure[1], quiet, withDialTimeout(2*time.Second))
		require.NoError(t, err)
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = adm.Stats(ctx, "")
		require.Error(t, err)
		require.False(t, strings.Contains(err.Error(), "s3cret"))
	})
}
