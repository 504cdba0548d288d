package broker

import (
	"fmt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/topicadmin"
	"github.com/metaq-go/metaq/plugins/host"
)

// CheckConfig runs the checks New makes on cfg beyond cfg.Validate,
// without opening a store or starting anything (metaq-server
// --check-config): the [tls] certificate, key and client CA load; builtin
// topic filters accept their config (an expr parses); every
// [[auth.user]] password_hash is a bcrypt hash; every [[plugin]] binary
// exists, is an executable regular file and, with sha256 set, has that
// checksum; <data_dir>/topics.toml, if there is one, parses and applies
// (topic names, settings) as it would at start. It returns every problem
// found (nil if none).
func CheckConfig(cfg *conf.Config) []string {
	var probs []string
	if err := cfg.Validate(); err != nil {
		probs = append(probs, err.Error())
	}
	if cfg.TLS.Enabled() {
		if _, err := security.NewTLS(cfg.TLS); err != nil {
			probs = append(probs, err.Error())
		}
	}
	probs = append(probs, security.CheckPasswordHashes(&cfg.Auth)...)
	probs = append(probs, filterset.Check(cfg)...)
	if msg := topicadmin.Check(cfg); msg != "" {
		probs = append(probs, msg)
	}
	for i, p := range cfg.Plugins {
		if err := host.CheckBinary(cfg.PluginPath(p), p.SHA256); err != nil {
			probs = append(probs, fmt.Sprintf("plugin[%d] %s %q: %v", i, p.Kind, p.Name, err))
		}
	}
	return probs
}
