package nft

import (
	"testing"
)

// A listing as nft 1.0.6 prints it: the parser's view of every object kind
// we write.
const sampleListing = `{"nftables":[{"metainfo":{"version":"1.0.6","release_name":"Lester Gooch #5","json_schema_version":1}},{"table":{"family":"ip","name":"t","handle":1}},{"map":{"family":"ip","name":"m","table":"t","type":["ipv4_addr","inet_proto","inet_service"],"handle":2,"map":"verdict","elem":[[{"elem":{"val":{"concat":["10.1.0.2","udp",53]},"comment":"ns/svc:dns"}},{"drop":null}],[{"concat":["10.1.0.1","tcp",80]},{"goto":{"target":"c2"}}]]}},{"set":{"family":"ip","name":"s","table":"t","type":"ipv4_addr","handle":3,"size":65535,"flags":["timeout"],"timeout":10800}},{"set":{"family":"ip","name":"h","table":"t","type":["ipv4_addr","ipv4_addr","inet_proto","inet_service"],"handle":4,"elem":[{"concat":["10.0.0.1","10.0.0.1","tcp",80]}]}},{"chain":{"family":"ip","table":"t","name":"c","handle":1}},{"chain":{"family":"ip","table":"t","name":"c2","handle":5}},{"chain":{"family":"ip","table":"t","name":"b","handle":10,"type":"filter","hook":"prerouting","prio":-110,"policy":"accept"}},{"rule":{"family":"ip","table":"t","chain":"c2","handle":8,"comment":"x #ABC","expr":[]}},{"rule":{"family":"ip","table":"t","chain":"c2","handle":9,"expr":[]}}]}`

func TestParseListing(t *testing.T) {
	s, err := parseListing([]byte(sampleListing))
	if err != nil {
		t.Fatal(err)
	}
	if !s.exists {
		t.Error("table not seen")
	}
	wantChains := map[string]string{"c": "", "c2": "\x00x #ABC\x00", "b": "filter/prerouting/-110"}
	for name, sig := range wantChains {
		if s.chains[name] != sig {
			t.Errorf("chain %s: sig %q, want %q", name, s.chains[name], sig)
		}
	}
	if got := s.sets["m"]; got == nil || !got.isMap || got.typ != "ipv4_addr . inet_proto . inet_service : verdict" {
		t.Errorf("map m: %+v", got)
	}
	if got := s.sets["s"]; got == nil || !got.dynamic || got.sig() != "ipv4_addr|10800" {
		t.Errorf("set s: %+v", got)
	}
	wantElems := map[elemID]string{
		{"m", "10.1.0.2 . udp . 53"}:            "drop",
		{"m", "10.1.0.1 . tcp . 80"}:            "goto c2",
		{"h", "10.0.0.1 . 10.0.0.1 . tcp . 80"}: "",
	}
	if len(s.elems) != len(wantElems) {
		t.Errorf("elements %v, want %v", s.elems, wantElems)
	}
	for id, v := range wantElems {
		if got, ok := s.elems[id]; !ok || got != v {
			t.Errorf("element %v: %q (%v), want %q", id, got, ok, v)
		}
	}
}

// FuzzParseListing: no listing makes the parser panic.
func FuzzParseListing(f *testing.F) {
	f.Add([]byte(sampleListing))
	f.Add([]byte(`{"nftables":[{"set":{"name":"x","type":7,"elem":[{"elem":{}}]}}]}`))
	f.Add([]byte(`{"nftables":[{"map":{"name":"x","type":"a","map":"verdict","elem":[[1]]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseListing(data)
	})
}
