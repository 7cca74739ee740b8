package server

import (
	"cmp"
	"context"
	"strconv"
	"testing"
	"time"
)

func newTestJournal(max int) *journal[int, *string] {
	return newJournal[int, *string](max, cmp.Compare[int])
}

func str(s string) *string { return &s }

// TestJournalHistoryIsBounded: however many revisions go by, the journal
// keeps at most its bound of changes (the server's memory for slow
// clients), and a client beyond them gets the whole state.
func TestJournalHistoryIsBounded(t *testing.T) {
	j := newTestJournal(8)
	for rev := 1; rev <= 1000; rev++ {
		j.update(false, func(set func(int, *string)) { set(rev%50, str("v")) })
		if n := len(j.hist) - j.start; n > 8 || len(j.hist) > 16 {
			t.Fatalf("revision %d: %d changes kept in an array of %d, want at most 8 in 16", rev, n, len(j.hist))
		}
	}
	if _, rev, reset := j.since(1); !reset || rev != 1000 {
		t.Errorf("since(1) = rev %d reset %v, want the whole state at 1000", rev, reset)
	}
	items, _, reset := j.since(995)
	if reset || len(items) != 5 {
		t.Errorf("since(995): %d items, reset %v, want the 5 keys changed since", len(items), reset)
	}
	full, _, _ := j.since(0)
	if len(full) != 50 {
		t.Errorf("whole state: %d keys, want 50", len(full))
	}
}

// TestJournalCoalesces: a key changed many times is one item, from the
// client's value to the current one; a key changed and changed back is none.
func TestJournalCoalesces(t *testing.T) {
	j := newTestJournal(100)
	a0, b0 := str("a0"), str("b0")
	j.update(true, func(set func(int, *string)) { set(1, a0); set(2, b0) })
	from := j.revision()
	var last *string
	for i := range 20 {
		last = str("a" + string(rune('a'+i)))
		j.update(false, func(set func(int, *string)) { set(1, last) })
	}
	j.update(false, func(set func(int, *string)) { set(2, str("b1")) })
	j.update(false, func(set func(int, *string)) { set(2, b0) }) // back to the client's value
	j.update(false, func(set func(int, *string)) { set(3, str("c")) })
	j.update(false, func(set func(int, *string)) { set(3, nil) }) // created and deleted
	items, rev, reset := j.since(from)
	if reset || rev != from+24 {
		t.Fatalf("since(%d): rev %d reset %v", from, rev, reset)
	}
	if len(items) != 1 || items[0].key != 1 || items[0].old != a0 || items[0].cur != last {
		t.Errorf("items: %+v, want key 1 from a0 to its last value only", items)
	}
	// Setting the same pointer is no revision.
	j.update(false, func(set func(int, *string)) { set(1, last) })
	if j.revision() != rev {
		t.Errorf("an identical write moved the revision to %d", j.revision())
	}
}

// BenchmarkJournalUpdateWithFullHistory is the cost of one revision of one
// key once the history is at its bound: it must not depend on the bound.
func BenchmarkJournalUpdateWithFullHistory(b *testing.B) {
	for _, max := range []int{1 << 10, DefaultHistorySize} {
		b.Run(strconv.Itoa(max), func(b *testing.B) {
			j := newTestJournal(max)
			v := str("v")
			for i := range 2 * max {
				j.update(false, func(set func(int, *string)) { set(i, v) })
			}
			b.ResetTimer()
			for i := range b.N {
				j.update(false, func(set func(int, *string)) { set(i%100, str("w")) })
			}
		})
	}
}

// TestJournalWaitAnswersARevisionFromNowhere: a client resuming from a
// revision the journal never reached (a bug or a forged request) is not
// left waiting for the journal to get there: wait returns, and since
// answers with a reset.
func TestJournalWaitAnswersARevisionFromNowhere(t *testing.T) {
	j := newTestJournal(8)
	j.update(false, func(set func(int, *string)) { set(1, str("v")) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := j.wait(ctx, 1<<40)
	if err != nil {
		t.Fatalf("wait(1<<40) at revision 1: %v", err)
	}
	if items, rev, reset := j.since(1 << 40); !reset || rev != cur || len(items) != 1 {
		t.Errorf("since(1<<40) = %d items, rev %d, reset %v; want the whole state at %d", len(items), rev, reset, cur)
	}
	// At the current revision, wait still waits for a change.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := j.wait(short, cur); err == nil {
		t.Errorf("wait(%d) at revision %d returned without a change", cur, cur)
	}
}
