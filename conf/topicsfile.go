package conf

import (
	"bytes"
	"fmt"
	"slices"
	"sort"

	"github.com/BurntSushi/toml"
)

// TopicsFileName is the file in data_dir where the broker keeps the topics
// created, altered and deleted through the admin API (docs/http.md). It is
// applied on top of server.toml at start.
const TopicsFileName = "topics.toml"

// TopicsFile is the content of <data_dir>/topics.toml: topics that replace
// or add to server.toml's [[topic]] tables (by name), and the names of
// server.toml topics that were deleted.
type TopicsFile struct {
	// Deleted are server.toml topics deleted live: they are not opened.
	Deleted []string `toml:"deleted"`
	// Topics are created or altered topics; one of the same name in
	// server.toml is replaced.
	Topics []Topic `toml:"topic"`
}

// ParseTopicsFile decodes a topics file. Unknown keys and invalid topic
// names are errors; the topics' settings are checked by ApplyTopics.
func ParseTopicsFile(data []byte, name string) (*TopicsFile, error) {
	var f TopicsFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, &Error{File: name, Problems: []Problem{syntaxProblem(err)}}
	}
	var probs []Problem
	for _, k := range md.Undecoded() {
		probs = append(probs, Problem{Key: k.String(), Msg: "unknown key"})
	}
	for _, d := range f.Deleted {
		if err := ValidateTopicName(d); err != nil {
			probs = append(probs, Problem{Key: "deleted", Msg: err.Error()})
		}
	}
	for i, t := range f.Topics {
		if err := ValidateTopicName(t.Name); err != nil {
			probs = append(probs, Problem{Key: fmt.Sprintf("topic[%d].name", i), Msg: err.Error()})
		}
	}
	if len(probs) > 0 {
		return nil, newError(name, probs)
	}
	return &f, nil
}

// Encode renders the file, with a header saying who writes it.
func (f *TopicsFile) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Topics created, altered and deleted through the broker's admin API\n" +
		"# (docs/http.md), applied on top of server.toml at start. The broker\n" +
		"# rewrites this file on every change: edit it only while the broker is\n" +
		"# stopped. A name in deleted is a server.toml topic that was deleted.\n\n")
	cp := TopicsFile{Deleted: slices.Clone(f.Deleted), Topics: slices.Clone(f.Topics)}
	sort.Strings(cp.Deleted)
	sort.Slice(cp.Topics, func(i, j int) bool { return cp.Topics[i].Name < cp.Topics[j].Name })
	if err := toml.NewEncoder(&b).Encode(cp); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ApplyTopics applies a topics file to c: deleted topics are dropped, the
// file's topics replace those of the same name or are added. It then
// validates c; on error c is unchanged.
func (c *Config) ApplyTopics(f *TopicsFile) error {
	topics := c.TopicsWith(f)
	old := c.Topics
	c.Topics = topics
	if err := c.Validate(); err != nil {
		c.Topics = old
		return fmt.Errorf("%s applied: %w", TopicsFileName, err)
	}
	return nil
}

// TopicsWith returns c's topics with f applied (c is not changed).
func (c *Config) TopicsWith(f *TopicsFile) []Topic {
	out := make([]Topic, 0, len(c.Topics)+len(f.Topics))
	for _, t := range c.Topics {
		if !slices.Contains(f.Deleted, t.Name) && !slices.ContainsFunc(f.Topics, func(x Topic) bool { return x.Name == t.Name }) {
			out = append(out, t)
		}
	}
	return append(out, f.Topics...)
}

// WithTopics returns a copy of c with topics in place of its [[topic]]
// tables, validated: what a live topic change would make the config.
func (c *Config) WithTopics(topics []Topic) (*Config, error) {
	cp := *c
	cp.Topics = topics
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	return &cp, nil
}
