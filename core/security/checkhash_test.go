package security

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
)

func TestCheckPasswordHashes(t *testing.T) {
	t.Parallel()
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	a := &conf.Auth{Users: []conf.User{{Name: "ok", PasswordHash: string(h)}, {Name: "none"}, {Name: "bad", PasswordHash: "plain"}}}
	probs := CheckPasswordHashes(a)
	require.Len(t, probs, 1)
	require.Contains(t, probs[0], `auth.user "bad": password_hash: `)
}
