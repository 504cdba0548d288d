package security

import (
	"fmt"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
)

// CheckPasswordHashes says which [[auth.user]] password_hash is not a
// bcrypt hash (metaq-server --check-config); nil if none.
func CheckPasswordHashes(a *conf.Auth) []string {
	var probs []string
	for _, u := range a.Users {
		if u.PasswordHash == "" {
			continue
		}
		if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			probs = append(probs, fmt.Sprintf("auth.user %q: password_hash: %v", u.Name, err))
		}
	}
	return probs
}
