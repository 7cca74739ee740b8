package nft

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// snapshot is what a table holds, in the terms the mirror uses. Reading it
// is the one expensive thing this backend does; it happens on a reset
// (startup, after a failure) and on a periodic resync, never on a change.
type snapshot struct {
	exists bool
	chains map[string]string // name -> sig
	sets   map[string]*set
	elems  map[elemID]string // elements of non-dynamic sets and maps
}

func newSnapshot() *snapshot {
	return &snapshot{chains: map[string]string{}, sets: map[string]*set{}, elems: map[elemID]string{}}
}

// reader reads a table.
type reader func(ctx context.Context) (*snapshot, error)

// hookSig is the hook part of a chain signature (see chainSig).
func hookSig(typ, hook string, prio int) string {
	return typ + "/" + hook + "/" + strconv.Itoa(prio)
}

// fakeReader reads a knftables.Fake's table (unit tests, --dry-run).
func fakeReader(f *knftables.Fake) reader {
	return func(context.Context) (*snapshot, error) {
		f.RLock()
		defer f.RUnlock()
		s := newSnapshot()
		t := f.Table
		if t == nil {
			return s, nil
		}
		s.exists = true
		for name, c := range t.Chains {
			var h *hook
			if c.Type != nil {
				h = &hook{*c.Type, *c.Hook, *c.Priority}
			}
			comments := make([]string, len(c.Rules))
			for i, r := range c.Rules {
				if r.Comment != nil {
					comments[i] = *r.Comment
				}
			}
			s.chains[name] = chainSig(h, comments)
		}
		for name, fs := range t.Sets {
			st := &set{name: name, typ: fs.Type, flags: fs.Flags}
			if fs.Timeout != nil {
				st.timeout = *fs.Timeout
			}
			st.dynamic = st.timeout > 0 || slices.Contains(fs.Flags, knftables.DynamicFlag)
			s.sets[name] = st
			if !st.dynamic {
				for _, e := range fs.Elements {
					s.elems[elemID{name, joinKey(e.Key...)}] = ""
				}
			}
		}
		for name, fm := range t.Maps {
			typ := fm.Type
			if fm.TypeOf != "" {
				typ = listedTypes[fm.TypeOf]
			}
			s.sets[name] = &set{name: name, isMap: true, typ: typ}
			for _, e := range fm.Elements {
				s.elems[elemID{name, joinKey(e.Key...)}] = joinKey(e.Value...)
			}
		}
		return s, nil
	}
}

// nftReader reads a table from the kernel with one `nft -j list table`,
// parsing its output as nft writes it: at 10,000 services it is 14 MB of
// JSON, which read whole (and copied into the listing's raw objects) was
// most of a full resync's peak.
func nftReader(fam knftables.Family, name string) reader {
	return func(ctx context.Context) (*snapshot, error) {
		cmd := exec.CommandContext(ctx, "nft", "-j", "list", "table", string(fam), name)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("nft list table %s %s: %w", fam, name, err)
		}
		snap, parseErr := readListing(out)
		if parseErr != nil {
			_, _ = io.Copy(io.Discard, out) // Wait closes the pipe
		}
		if err := cmd.Wait(); err != nil {
			if strings.Contains(stderr.String(), "No such file or directory") {
				return newSnapshot(), nil
			}
			return nil, fmt.Errorf("nft list table %s %s: %w: %s", fam, name, err, strings.TrimSpace(stderr.String()))
		}
		if err := parseErr; err != nil {
			if refused := checkWritable(ctx, fam, name); refused != nil {
				return nil, fmt.Errorf("%w (and its listing does not parse: %v)", refused, err)
			}
			return nil, err
		}
		return snap, nil
	}
}

// checkWritable asks the kernel, without changing anything (nft --check),
// whether it would let this process change table fam name, and returns
// its refusal, nil if it would. A listing that does not parse has been seen
// when the kernel refuses: nft 1.0.6 prints the JSON of a table with flags
// owner (one that only another process's netlink socket may change) cut off
// after "flags". The kernel's refusal (EPERM) names the cause; the parse
// error does not.
func checkWritable(ctx context.Context, fam knftables.Family, name string) error {
	cmd := exec.CommandContext(ctx, "nft", "--check", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("add table %s %s\n", fam, name))
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	// nft's first line says why ("/dev/stdin:1:1-19: Error: Could not
	// process rule: Operation not permitted"); the others quote the input.
	msg, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if _, after, ok := strings.Cut(msg, "Error: "); ok {
		msg = after
	}
	return fmt.Errorf("the kernel refuses changes to table %s %s: %w: %s", fam, name, err, msg)
}

// The JSON objects of `nft -j list table` that we read: {"nftables":
// [{"table": ...}, {"chain": ...}, {"rule": ...}, {"map": ...}, ...]}.

type jsonChain struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Hook string `json:"hook"`
	Prio *int   `json:"prio"`
}

type jsonRule struct {
	Chain   string `json:"chain"`
	Comment string `json:"comment"`
}

type jsonSet struct {
	Name    string            `json:"name"`
	Type    json.RawMessage   `json:"type"`
	Map     json.RawMessage   `json:"map"`
	Flags   []string          `json:"flags"`
	Timeout int64             `json:"timeout"`
	Elem    []json.RawMessage `json:"elem"`
}

// parseListing turns nft's JSON listing of a table into a snapshot.
func parseListing(data []byte) (*snapshot, error) {
	return readListing(bytes.NewReader(data))
}

// readListing is parseListing of the listing r reads, one object of the
// "nftables" list at a time.
func readListing(r io.Reader) (*snapshot, error) {
	s := newSnapshot()
	hooks := map[string]string{}
	comments := map[string][]string{}
	dec := json.NewDecoder(r)
	objects := func(each func(obj map[string]json.RawMessage) error) error {
		if err := delim(dec, '{'); err != nil {
			return err
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return err
			}
			if key != "nftables" {
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return err
				}
				continue
			}
			if err := delim(dec, '['); err != nil {
				return err
			}
			for dec.More() {
				var obj map[string]json.RawMessage
				if err := dec.Decode(&obj); err != nil {
					return err
				}
				if err := each(obj); err != nil {
					return err
				}
			}
			if err := delim(dec, ']'); err != nil {
				return err
			}
		}
		return delim(dec, '}')
	}
	var parseErr error // of an object, as opposed to the JSON
	err := objects(func(obj map[string]json.RawMessage) error {
		for kind, raw := range obj {
			switch kind {
			case "table":
				s.exists = true
			case "chain":
				var c jsonChain
				if err := json.Unmarshal(raw, &c); err != nil {
					parseErr = fmt.Errorf("parsing chain: %w", err)
					return parseErr
				}
				if c.Hook != "" && c.Prio != nil {
					hooks[c.Name] = hookSig(c.Type, c.Hook, *c.Prio)
				}
				if _, ok := comments[c.Name]; !ok {
					comments[c.Name] = []string{}
				}
			case "rule":
				var r jsonRule
				if err := json.Unmarshal(raw, &r); err != nil {
					parseErr = fmt.Errorf("parsing rule: %w", err)
					return parseErr
				}
				comments[r.Chain] = append(comments[r.Chain], r.Comment)
			case "set", "map":
				var js jsonSet
				if err := json.Unmarshal(raw, &js); err != nil {
					parseErr = fmt.Errorf("parsing %s: %w", kind, err)
					return parseErr
				}
				if err := s.addSet(kind == "map", &js); err != nil {
					parseErr = fmt.Errorf("%s %s: %w", kind, js.Name, err)
					return parseErr
				}
			}
		}
		return nil
	})
	switch {
	case parseErr != nil:
		return nil, parseErr
	case err != nil:
		return nil, fmt.Errorf("parsing nft listing: %w", err)
	}
	for name, cs := range comments {
		var b strings.Builder
		b.WriteString(hooks[name])
		for _, c := range cs {
			b.WriteString("\x00")
			b.WriteString(c)
		}
		s.chains[name] = b.String()
	}
	return s, nil
}

// delim reads the JSON delimiter want.
func delim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("%v where %v was expected", t, want)
	}
	return nil
}

func (s *snapshot) addSet(isMap bool, js *jsonSet) error {
	keyType, err := typeString(js.Type)
	if err != nil {
		return err
	}
	st := &set{name: js.Name, isMap: isMap, typ: keyType, timeout: time.Duration(js.Timeout) * time.Second}
	if isMap {
		valType, err := typeString(js.Map)
		if err != nil {
			return err
		}
		st.typ += " : " + valType
	}
	st.dynamic = st.timeout > 0 || slices.Contains(js.Flags, "dynamic") || slices.Contains(js.Flags, "timeout")
	s.sets[js.Name] = st
	if st.dynamic {
		return nil
	}
	for _, raw := range js.Elem {
		if !isMap {
			key, err := elemString(raw)
			if err != nil {
				return err
			}
			s.elems[elemID{js.Name, key}] = ""
			continue
		}
		var pair []json.RawMessage
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
			return fmt.Errorf("map element %s: not a [key, value] pair", raw)
		}
		key, err := elemString(pair[0])
		if err != nil {
			return err
		}
		val, err := elemString(pair[1])
		if err != nil {
			return err
		}
		s.elems[elemID{js.Name, key}] = val
	}
	return nil
}

// typeString renders a set type: "ipv4_addr" or ["ipv4_addr", "inet_proto"].
func typeString(raw json.RawMessage) (string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return one, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", fmt.Errorf("type %s: %w", raw, err)
	}
	return joinKey(many...), nil
}

// elemString renders an element's key or value as we write it:
// "10.0.0.1 . tcp . 80", "goto service-X", "drop".
func elemString(raw json.RawMessage) (string, error) {
	// Not a json.Decoder with UseNumber: one per element was most of what
	// reading a table allocated (200 of 480 MB at 10,000 services).
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	return renderValue(v)
}

// maxExact bounds the integers a float64 holds exactly.
const maxExact = 1 << 53

func renderValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		// Numbers in the elements we write are ports, range bounds and
		// prefix lengths.
		if x != math.Trunc(x) || math.Abs(x) >= maxExact {
			return "", fmt.Errorf("unexpected number %v", x)
		}
		return strconv.FormatInt(int64(x), 10), nil
	case map[string]any:
		if len(x) != 1 {
			return "", fmt.Errorf("unexpected element expression %v", x)
		}
		for k, inner := range x {
			switch k {
			case "concat":
				parts, ok := inner.([]any)
				if !ok {
					return "", fmt.Errorf("concat of %T", inner)
				}
				out := make([]string, len(parts))
				for i, p := range parts {
					s, err := renderValue(p)
					if err != nil {
						return "", err
					}
					out[i] = s
				}
				return joinKey(out...), nil
			case "elem":
				m, ok := inner.(map[string]any)
				if !ok {
					return "", fmt.Errorf("elem of %T", inner)
				}
				return renderValue(m["val"])
			case "goto", "jump":
				m, _ := inner.(map[string]any)
				target, _ := m["target"].(string)
				return k + " " + target, nil
			case "drop", "accept", "return", "continue":
				return k, nil
			case "range":
				bounds, ok := inner.([]any)
				if !ok || len(bounds) != 2 {
					return "", fmt.Errorf("range of %v", inner)
				}
				lo, err := renderValue(bounds[0])
				if err != nil {
					return "", err
				}
				hi, err := renderValue(bounds[1])
				return lo + "-" + hi, err
			case "prefix":
				m, _ := inner.(map[string]any)
				addr, err := renderValue(m["addr"])
				if err != nil {
					return "", err
				}
				l, err := renderValue(m["len"])
				return addr + "/" + l, err
			}
			return "", fmt.Errorf("unexpected element expression %q", k)
		}
	}
	return "", fmt.Errorf("unexpected element value %v (%T)", v, v)
}
