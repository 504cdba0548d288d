package broker

import "strings"

// Helpers only the white-box tests call, kept out of the shipped package.

// writeSummary is writeSummaryFor (stats.go) for a viewer that sees
// everything.
func (b *Broker) writeSummary(sb *strings.Builder) { b.writeSummaryFor(sb, viewer{}) }
