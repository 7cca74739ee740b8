package config

import (
	"fmt"
	"strconv"

	yamlv3 "go.yaml.in/yaml/v3"
)

// duplicateFields lists the keys that a YAML (or JSON) document sets twice
// in one mapping, each as `duplicate field "<path>" (line N, first set on
// line M)` with its full path (linux.conntrack.min, logging.vmodule[0].v),
// which the YAML decoder's own message ("key "min" already set in map")
// lacks. It returns nil when the document does not parse; the decoder then
// reports the syntax error.
func duplicateFields(data []byte) []string {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return nil
	}
	var out []string
	var walk func(n *yamlv3.Node, path string)
	walk = func(n *yamlv3.Node, path string) {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				walk(c, path+"["+strconv.Itoa(i)+"]")
			}
		case yamlv3.MappingNode:
			first := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if line, ok := first[k.Value]; ok {
					out = append(out, fmt.Sprintf("duplicate field %q (line %d, first set on line %d)", p, k.Line, line))
				} else {
					first[k.Value] = k.Line
				}
				walk(v, p)
			}
		}
		// Aliases are not followed: what they point at is checked where
		// it is written.
	}
	walk(&doc, "")
	return out
}
