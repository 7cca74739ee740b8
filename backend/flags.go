package backend

import (
	"encoding/csv"
	"flag"
	"slices"
	"strings"
)

// StringsVar defines a list flag on fs, as kube-proxy's list flags behave
// (spf13/pflag's string slices): values are comma-separated (CSV quoting
// allowed), the first use on the command line replaces the default and
// further uses append. The value shows as [a,b].
func StringsVar(fs *flag.FlagSet, p *[]string, name string, value []string, usage string) {
	*p = slices.Clone(value)
	fs.Var(&stringsValue{p: p}, name, usage)
}

// stringsValue is a list flag's value.
type stringsValue struct {
	p       *[]string
	changed bool
}

// Set implements flag.Value.
func (v *stringsValue) Set(s string) error {
	var vals []string
	if s != "" {
		var err error
		if vals, err = csv.NewReader(strings.NewReader(s)).Read(); err != nil {
			return err
		}
	} else {
		vals = []string{}
	}
	if v.changed {
		*v.p = append(*v.p, vals...)
	} else {
		*v.p = vals
	}
	v.changed = true
	return nil
}

// String implements flag.Value.
func (v *stringsValue) String() string {
	if v == nil || v.p == nil {
		return "[]"
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write(*v.p) // a strings.Builder does not fail
	w.Flush()
	return "[" + strings.TrimSuffix(b.String(), "\n") + "]"
}

// Type names the value's type in help output ("strings", as pflag's string
// slices): a command line built with spf13/pflag uses the value as is.
func (v *stringsValue) Type() string { return "strings" }
