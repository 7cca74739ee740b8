package backend

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestStringsVar(t *testing.T) {
	for _, tc := range []struct {
		name    string
		def     []string
		args    []string
		want    []string
		shown   string
		wantErr bool
	}{
		{name: "default kept when the flag is not given", def: []string{"primary"}, want: []string{"primary"}, shown: "[primary]"},
		{name: "first use replaces the default", def: []string{"primary"}, args: []string{"--l=10.0.0.0/8,fd00::/64"}, want: []string{"10.0.0.0/8", "fd00::/64"}, shown: "[10.0.0.0/8,fd00::/64]"},
		{name: "further uses append", args: []string{"--l=a", "--l=b,c"}, want: []string{"a", "b", "c"}, shown: "[a,b,c]"},
		{name: "empty value empties the list", def: []string{"x"}, args: []string{"--l="}, want: []string{}, shown: "[]"},
		{name: "CSV quoting keeps a comma", args: []string{`--l="a,b",c`}, want: []string{"a,b", "c"}, shown: `["a,b",c]`},
		{name: "bad CSV is an error", args: []string{`--l="a`}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var got []string
			StringsVar(fs, &got, "l", tc.def, "")
			err := fs.Parse(tc.args)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error; got %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("value %q, want %q", got, tc.want)
			}
			if s := fs.Lookup("l").Value.String(); s != tc.shown {
				t.Errorf("shown as %s, want %s", s, tc.shown)
			}
		})
	}
	// The default slice is the caller's: parsing must not write into it.
	def := []string{"a", "b"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var got []string
	StringsVar(fs, &got, "l", def, "")
	if err := fs.Parse([]string{"--l=x", "--l=y"}); err != nil || def[0] != "a" {
		t.Errorf("err %v, default now %q", err, def)
	}
}
