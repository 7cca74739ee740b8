package kubeproxy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEffectiveCaps(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		status  string
		want    uint64
		wantErr bool
	}{
		{status: "Name:\tkpng\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n", want: 0x1ffffffffff},
		{status: "CapEff:\t000001fffeffefff\n", want: 0x1fffeffefff},
		{status: "Name:\tkpng\n", wantErr: true},
		{status: "CapEff:\tzz\n", wantErr: true},
	} {
		path := filepath.Join(dir, "status")
		if err := os.WriteFile(path, []byte(tc.status), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := effectiveCaps(path)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%q: %#x, %v; want %#x, error %t", tc.status, got, err, tc.want, tc.wantErr)
		}
	}
	if caps := uint64(0x1fffeffefff); caps&(1<<capNetAdmin) != 0 {
		t.Error("CAP_NET_ADMIN's bit is set in a set it was dropped from")
	}
	if err := checkNetAdmin("a-backend-that-needs-nothing"); err != nil {
		t.Errorf("a backend outside netAdminBackends: %v", err)
	}
}
