// Package tofile writes a node's view to a file or standard output, once or
// as a stream of one document per revision: the simplest consumer of the
// brain, for people (what does node N do?) and for scripts in any language.
package tofile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// Sink writes the view of one node.
type Sink struct {
	Options brain.Options
	// Output is a file path, or "-" for standard output.
	Output string
	// Format is "yaml" or "json".
	Format string
	// Follow writes a new document at every revision of the view, until the
	// context ends: YAML documents separated by "---", or JSON lines.
	Follow bool
}

// Run waits for a complete cluster state, then writes the view.
func (s *Sink) Run(ctx context.Context, store *cluster.Store) error {
	if s.Format != "yaml" && s.Format != "json" {
		return fmt.Errorf("--format %q: must be yaml or json", s.Format)
	}
	var out io.Writer = os.Stdout
	if s.Output != "-" {
		f, err := os.Create(s.Output)
		if err != nil {
			return fmt.Errorf("opening output: %w", err)
		}
		defer f.Close()
		out = f
	}
	logger := klog.FromContext(ctx)
	view := brain.NewView(s.Options)
	var storeRev uint64
	written := false
	for {
		rev, err := store.Wait(ctx, storeRev)
		if err != nil {
			if written {
				return nil // ended by the caller after at least one document
			}
			return fmt.Errorf("waiting for the cluster state: %w", err)
		}
		storeRev = rev
		var state *localv1.NodeState
		var changed bool
		store.View(func(r cluster.Reader) {
			before := view.Revision()
			view.Update(r)
			changed = view.Revision() != before
			if changed || !written {
				state = view.State()
			}
		})
		if state == nil {
			continue
		}
		doc, err := Marshal(state, s.Format, !s.Follow)
		if err != nil {
			return err
		}
		if s.Follow && s.Format == "yaml" {
			doc = append([]byte("---\n"), doc...)
		}
		if _, err := out.Write(doc); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		written = true
		st, vs := store.Stats(), view.Stats()
		logger.V(2).Info("Wrote view", "node", s.Options.NodeName, "revision", state.Revision,
			"events", st.Events, "clusterRevisions", st.Revision, "services", len(state.Services),
			"recomputed", vs.Recomputed)
		if !s.Follow {
			return nil
		}
	}
}

// Marshal renders a state as YAML or JSON (indented, or on one line), with
// protobuf's JSON field names. Fields at their zero value are left out.
func Marshal(state *localv1.NodeState, format string, indent bool) ([]byte, error) {
	js, err := protojson.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("encoding state: %w", err)
	}
	// protojson's spacing is deliberately unstable; normalise it.
	var buf bytes.Buffer
	if format == "yaml" {
		return jsonToYAML(js)
	}
	if indent {
		err = json.Indent(&buf, js, "", "  ")
	} else {
		err = json.Compact(&buf, js)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding state: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// jsonToYAML converts JSON to block-style YAML, keeping the field order
// (the model's order: a service before its endpoints).
func jsonToYAML(js []byte) ([]byte, error) {
	var node yaml.Node
	if err := yaml.Unmarshal(js, &node); err != nil {
		return nil, fmt.Errorf("encoding state: %w", err)
	}
	var blockStyle func(n *yaml.Node)
	blockStyle = func(n *yaml.Node) {
		n.Style &^= yaml.FlowStyle
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			n.Style = 0 // let the encoder quote only where YAML needs it
		}
		for _, c := range n.Content {
			blockStyle(c)
		}
	}
	blockStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, fmt.Errorf("encoding state: %w", err)
	}
	return buf.Bytes(), enc.Close()
}
