package procstat

import "testing"

func TestRSSKiB(t *testing.T) {
	// A running Go test holds at least a megabyte, and far less than a
	// terabyte: a parse of the wrong line or unit falls outside.
	if n := RSSKiB(); n < 1<<10 || n > 1<<30 {
		t.Errorf("RSSKiB() = %d", n)
	}
	// The peak read after the RSS: it can only have grown meanwhile.
	if rss, n := RSSKiB(), PeakRSSKiB(); n < rss || n > 1<<30 {
		t.Errorf("PeakRSSKiB() = %d, RSSKiB() = %d", n, rss)
	}
}
