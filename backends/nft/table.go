package nft

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// fixedOwner owns the fixed part; a service's owner is "namespace/name".
const fixedOwner = ""

// staleDelay is how long a chain that no map element may reference any
// more stays (empty) before it is deleted: before Linux 6.2 the kernel
// notices only a little later that a deleted map element released it.
const staleDelay = time.Second

// table is one nftables table (one IP family): what we want in it, and a
// mirror of what we wrote, so that a sync sends only the difference.
type table struct {
	fam  family
	nft  knftables.Interface
	read reader
	// nl, when set, writes the incremental transactions through netlink
	// (see netlink.go); nft writes the others.
	nl *nlTable
	// count counts the rules of chains in the kernel, for the periodic
	// check (see check.go); nil: every periodic sync reads the table back.
	count ruleCounter

	env   *env             // the env of the parts below
	parts map[string]*part // by owner, as last written

	// The mirror: what the kernel holds, as far as we know. The kernel
	// holds an element when some part claims it, with the value of its
	// first claim (see have): a map of the elements beside the claims
	// would be a sixth of the mirror at 10,000 services.
	chains map[string]string // name -> sig ("" for an empty stale chain)
	sets   map[string]*set
	claims map[elemID][]claim
	stale  map[string]time.Time // chains emptied, to delete later
	// synced: the mirror is valid (a sync succeeded since the last reset).
	synced bool
	// lastFull is when the table was last read back (or written whole).
	lastFull time.Time
}

// claim is one owner's wish for an element. Two services may want the same
// element (a pod port behind two services in the hairpin set; a shared
// external IP): it stays while anyone wants it. When values differ, the
// smallest owner wins, so that the result does not depend on event order.
//
// A claim points at the element in its owner's part, which the mirror
// keeps (parts are never changed once built): at 10,000 services the
// mirror holds some 130,000 claims, and a copy of each element in its
// claim was a fifth of the mirror's memory.
type claim struct {
	owner string
	*elem
}

func newTable(fam family, nft knftables.Interface, read reader) *table {
	return &table{fam: fam, nft: nft, read: read, parts: map[string]*part{}}
}

// txStats counts a transaction's operations, for logs and tests.
type txStats struct {
	chainsWritten, chainsEmptied, elemsAdded, elemsDeleted int
}

// plan is a transaction and the mirror it leads to once it succeeded.
type plan struct {
	// ops are the transaction's operations. They become a
	// knftables.Transaction, netlink messages or nft's input only when
	// written (see table.run): at 10,000 services a cold sync has 150,000,
	// and holding them in all these forms at once was most of its peak.
	ops   []op
	stats txStats
	full  bool
	parts map[string]*part // new parts (nil: owner gone); full: all parts

	chains map[string]string // new mirror entries
	sets   map[string]*set   // nil: deleted
	claims map[elemID][]claim
	stale  map[string]bool // chains emptied now
}

// op is one operation of a transaction.
type op struct {
	verb verb
	obj  knftables.Object // nil for an element: see elem
	// elem is an element's, made a knftables.Element only when written
	// (elements are most of a cold sync's operations); it points into a
	// part, which is never changed once built.
	elem *elem
	// rule is the typed form of a rule added (nil: none, or not a rule).
	rule ruleSpec
}

// object is o's object as knftables has it.
func (o op) object() knftables.Object {
	if o.elem != nil {
		return elemObject(*o.elem)
	}
	return o.obj
}

// transaction is ops as a knftables transaction of nft's.
func transaction(nft knftables.Interface, ops []op) *knftables.Transaction {
	tx := nft.NewTransaction()
	for _, o := range ops {
		switch o.verb {
		case opAdd:
			tx.Add(o.object())
		case opFlush:
			tx.Flush(o.object())
		case opDelete:
			tx.Delete(o.object())
		}
	}
	return tx
}

type verb int

const (
	opAdd verb = iota
	opFlush
	opDelete
)

func (p *plan) add(o knftables.Object)    { p.ops = append(p.ops, op{verb: opAdd, obj: o}) }
func (p *plan) flush(o knftables.Object)  { p.ops = append(p.ops, op{verb: opFlush, obj: o}) }
func (p *plan) delete(o knftables.Object) { p.ops = append(p.ops, op{verb: opDelete, obj: o}) }

// addElem and deleteElem add and delete an element.
func (p *plan) addElem(e *elem)    { p.ops = append(p.ops, op{verb: opAdd, elem: e}) }
func (p *plan) deleteElem(e *elem) { p.ops = append(p.ops, op{verb: opDelete, elem: e}) }

// addRule adds a rule, with its typed form for the netlink path.
func (p *plan) addRule(r *knftables.Rule, spec ruleSpec) {
	p.ops = append(p.ops, op{verb: opAdd, obj: r, rule: spec})
}

// build computes the transaction that takes the kernel from the mirror (or,
// when full, from what snap shows) to the wanted parts.
func (t *table) build(parts map[string]*part, full bool, snap *snapshot) *plan {
	// Sized for what the parts hold: a full sync at 10,000 services goes
	// over some 150,000 objects, and growing these maps was most of its
	// garbage.
	var nChains, nSets, nElems, nRules int
	for _, np := range parts {
		if np != nil {
			nChains, nSets, nElems = nChains+len(np.chains), nSets+len(np.sets), nElems+len(np.elems)
			for _, c := range np.chains {
				nRules += len(c.rules)
			}
		}
	}
	p := &plan{full: full, parts: parts,
		ops:    make([]op, 0, nChains+nSets+nElems+nRules+1),
		chains: make(map[string]string, nChains), sets: make(map[string]*set, nSets),
		claims: make(map[elemID][]claim, nElems), stale: map[string]bool{}}

	haveChains, haveSets, haveElem := t.chains, t.sets, t.have
	if full {
		haveChains, haveSets = snap.chains, snap.sets
		haveElem = func(id elemID) (string, bool) { v, ok := snap.elems[id]; return v, ok }
	}

	wantChains := make(map[string]*chain, nChains)
	wantSets := make(map[string]*set, nSets)
	goneChains := map[string]bool{}
	goneSets := map[string]bool{}

	claimsOf := func(id elemID) []claim {
		if c, ok := p.claims[id]; ok {
			return c
		}
		c := slices.Clone(t.claims[id])
		if full {
			c = nil
		}
		p.claims[id] = c
		return c
	}
	for _, owner := range slices.Sorted(maps.Keys(parts)) {
		if !full {
			if old := t.parts[owner]; old != nil {
				for _, c := range old.chains {
					goneChains[c.name] = true
				}
				for _, s := range old.sets {
					goneSets[s.name] = true
				}
				for _, e := range old.elems {
					p.claims[e.elemID] = slices.DeleteFunc(claimsOf(e.elemID), func(c claim) bool { return c.owner == owner })
				}
			}
		}
		np := parts[owner]
		if np == nil {
			continue
		}
		for _, c := range np.chains {
			wantChains[c.name] = c
		}
		for _, s := range np.sets {
			wantSets[s.name] = s
		}
		for i := range np.elems {
			e := &np.elems[i]
			cl := claimsOf(e.elemID)
			i, _ := slices.BinarySearchFunc(cl, owner, func(c claim, o string) int { return strings.Compare(c.owner, o) })
			if i < len(cl) && cl[i].owner == owner {
				continue // the same element twice in one part
			}
			p.claims[e.elemID] = slices.Insert(cl, i, claim{owner: owner, elem: e})
		}
	}
	for name := range wantChains {
		delete(goneChains, name)
	}
	for name := range wantSets {
		delete(goneSets, name)
	}
	if full {
		for name := range haveChains {
			if wantChains[name] == nil {
				goneChains[name] = true
			}
		}
		for name := range haveSets {
			if wantSets[name] == nil {
				goneSets[name] = true
			}
		}
	}

	if full {
		p.add(&knftables.Table{Comment: knftables.PtrTo("rules for kpng")})
	}

	// 1. New sets and maps; sets whose definition changed are replaced
	// below, once the rules that use them are gone. newSetAt is where
	// each new set is added, for its elements to follow (see step 7).
	var replaceSets []*set
	newSetAt := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(wantSets)) {
		s := wantSets[name]
		have := haveSets[name]
		switch {
		case have == nil:
			newSetAt[name] = len(p.ops)
			p.add(setObject(s))
		case have.sig() != s.sig():
			replaceSets = append(replaceSets, s)
		}
		p.sets[name] = s
	}
	replaced := map[string]bool{}
	for _, s := range replaceSets {
		replaced[s.name] = true
	}

	// 2. New chains; base chains on the wrong hook are recreated. A chain
	// whose rules use a set to replace is rewritten too: the kernel does
	// not delete a set in use.
	var rewrite []*chain
	var recreate []*chain
	for _, name := range slices.Sorted(maps.Keys(wantChains)) {
		c := wantChains[name]
		have, ok := haveChains[name]
		switch {
		case !ok:
			p.add(newChain(c))
			rewrite = append(rewrite, c)
		case have != c.sig || usesAny(c, replaced):
			if c.hook != nil && chainSig(c.hook, nil) != hookPart(have) {
				recreate = append(recreate, c)
			}
			rewrite = append(rewrite, c)
		}
		p.chains[name] = c.sig
	}

	// 3. Elements that go or change.
	// The elements to look at: those some part claims or claimed (every
	// one that changed owner is in p.claims), and when full, those the
	// kernel holds too.
	ids := make([]elemID, 0, len(p.claims))
	for id := range p.claims {
		ids = append(ids, id)
	}
	if full {
		for id := range snap.elems {
			if _, ok := p.claims[id]; !ok {
				ids = append(ids, id)
			}
		}
	}
	var adds []*elem
	if full {
		adds = make([]*elem, 0, len(ids)) // at most; 150,000 in a cold sync
	}
	for _, id := range sortIDs(ids) {
		var want *claim
		if cl := p.claims[id]; len(cl) > 0 {
			want = &cl[0]
		}
		have, ok := haveElem(id)
		if replaced[id.set] {
			ok = false // the set is recreated empty
		}
		if goneSets[id.set] {
			// It goes with its set. No part claims it: parts put
			// elements only in their own sets and in the fixed part's,
			// which are always there.
			continue
		}
		switch {
		case want == nil && ok:
			p.deleteElem(&elem{elemID: id, isMap: haveSets[id.set] != nil && haveSets[id.set].isMap})
			p.stats.elemsDeleted++
		case want != nil && ok && have != want.value:
			p.deleteElem(want.elem)
			p.stats.elemsDeleted++
			fallthrough
		case want != nil && !ok:
			adds = append(adds, want.elem)
		}
	}

	// 4. Empty the chains to rewrite and the chains no longer wanted (they
	// are deleted later: see staleDelay).
	for _, c := range rewrite {
		if _, ok := haveChains[c.name]; ok && haveChains[c.name] != "" {
			p.flush(&knftables.Chain{Name: c.name})
		}
	}
	for _, c := range recreate {
		p.delete(&knftables.Chain{Name: c.name})
		p.add(newChain(c))
	}
	for _, name := range slices.Sorted(maps.Keys(goneChains)) {
		have, ok := haveChains[name]
		if !ok {
			continue
		}
		if have != "" {
			p.flush(&knftables.Chain{Name: name})
			p.stats.chainsEmptied++
		}
		p.chains[name] = ""
		p.stale[name] = true
	}

	// 5. Sets no longer wanted, and sets replaced.
	for _, name := range slices.Sorted(maps.Keys(goneSets)) {
		if have := haveSets[name]; have != nil {
			p.delete(setObject(have))
		}
		p.sets[name] = nil
	}
	for _, s := range replaceSets {
		p.delete(setObject(s))
		p.add(setObject(s))
	}

	// 6. The rules of new and changed chains.
	for _, c := range rewrite {
		for _, r := range c.rules {
			rl := &knftables.Rule{Chain: c.name, Rule: r.text}
			if r.comment != "" {
				rl.Comment = knftables.PtrTo(r.comment)
			}
			p.addRule(rl, r.spec)
		}
		p.stats.chainsWritten++
	}

	// 7. New elements (they may point at the chains just written). Those
	// of a new set that point at no chain go right after the set instead:
	// nft then declares them with it ("add map ... { ...; elements = {
	// ... } }", see merger), which cost the kernel 4.8 s instead of 6.2 s
	// for a cold sync's 10,000 endpoint maps (docs/performance.md).
	early := map[int][]*elem{}
	nEarly := 0
	for _, e := range adds {
		p.stats.elemsAdded++
		if at, ok := newSetAt[e.set]; ok && !strings.HasSuffix(wantSets[e.set].typ, "verdict") {
			early[at] = append(early[at], e)
			nEarly++
			continue
		}
		p.addElem(e)
	}
	if nEarly > 0 {
		ops := make([]op, 0, len(p.ops)+nEarly)
		for i, o := range p.ops {
			ops = append(ops, o)
			for _, e := range early[i] {
				ops = append(ops, op{verb: opAdd, elem: e})
			}
		}
		p.ops = ops
	}
	return p
}

// commit makes the mirror what a successful plan wrote.
func (t *table) commit(p *plan, e *env, now time.Time) {
	if p.full {
		// The plan's maps become the mirror's (a full plan has an entry
		// for everything the mirror holds): copying them doubled the
		// 150,000 claims and chains at 10,000 services.
		t.parts = p.parts
		t.chains, t.sets, t.claims = p.chains, p.sets, p.claims
		t.stale = map[string]time.Time{}
		for name := range p.stale {
			t.stale[name] = now
		}
		maps.DeleteFunc(t.sets, func(_ string, s *set) bool { return s == nil })
		maps.DeleteFunc(t.claims, func(_ elemID, cl []claim) bool { return len(cl) == 0 })
	} else {
		update(t.parts, p.parts, func(np *part) (*part, bool) { return np, np != nil })
		for name, sig := range p.chains {
			t.chains[name] = sig
			if !p.stale[name] {
				delete(t.stale, name)
			} else if _, ok := t.stale[name]; !ok {
				t.stale[name] = now
			}
		}
		update(t.sets, p.sets, func(s *set) (*set, bool) { return s, s != nil })
		update(t.claims, p.claims, func(cl []claim) ([]claim, bool) { return cl, len(cl) > 0 })
	}
	t.env = e
	t.synced = true
	if p.full {
		t.lastFull = now
	}
}

// forget drops the mirror, at the start of a full sync: that compares
// with what the kernel holds, not with the mirror, which would otherwise
// stay live beside the table read back and the new parts (40 MiB of 10,000
// services, in each full resync). Until a sync commits, the table counts
// as not synced: the next sync is a full one.
func (t *table) forget() {
	t.synced = false
	t.parts = map[string]*part{}
	t.chains, t.sets, t.claims = map[string]string{}, map[string]*set{}, map[elemID][]claim{}
	t.stale = map[string]time.Time{}
}

// have says whether the kernel holds element id, as far as the mirror
// knows, and its value.
func (t *table) have(id elemID) (string, bool) {
	if cl := t.claims[id]; len(cl) > 0 {
		return cl[0].value, true
	}
	return "", false
}

// update applies a plan's changes to a mirror map: keep says, for each
// changed key, its new value, or that it is gone.
func update[K comparable, V, C any](mirror map[K]V, changes map[K]C, keep func(C) (V, bool)) {
	for k, c := range changes {
		if v, ok := keep(c); ok {
			mirror[k] = v
		} else {
			delete(mirror, k)
		}
	}
}

// deleteStale deletes the chains emptied at least staleDelay ago, in a
// transaction of its own: a failure there must not hold back a sync.
func (t *table) deleteStale(ctx context.Context, now time.Time) (int, error) {
	var due []string
	for name, since := range t.stale {
		if now.Sub(since) >= staleDelay {
			due = append(due, name)
		}
	}
	if len(due) == 0 {
		return 0, nil
	}
	slices.Sort(due)
	p := &plan{}
	for _, name := range due {
		p.delete(&knftables.Chain{Name: name})
	}
	if _, err := t.run(ctx, p); err != nil {
		return 0, fmt.Errorf("deleting %d stale chains: %w", len(due), err)
	}
	for _, name := range due {
		delete(t.stale, name)
		delete(t.chains, name)
	}
	return len(due), nil
}

// run runs a plan's transaction: through netlink when the table has a
// netlink writer, the plan is incremental and every operation translates;
// through nft otherwise. It returns why an incremental plan could not go
// through netlink ("" when it did, or when it was a full one).
func (t *table) run(ctx context.Context, p *plan) (fallback string, err error) {
	if t.nl == nil || p.full {
		return "", t.runNft(ctx, p.ops)
	}
	msgs, err := t.nl.encode(p.ops, func(name string) *set {
		if s, ok := p.sets[name]; ok && s != nil {
			return s
		}
		return t.sets[name]
	})
	var u *untranslatable
	switch {
	case errors.As(err, &u):
		return u.what, t.runNft(ctx, p.ops)
	case err != nil:
		return "", err
	}
	return "", t.nl.send(ctx, msgs)
}

// opsRunner runs operations without making them a knftables.Transaction
// first (nftCommand: it renders them as nft reads them).
type opsRunner interface {
	runOps(ctx context.Context, ops []op) error
}

// runNft runs ops as one transaction of t.nft's.
func (t *table) runNft(ctx context.Context, ops []op) error {
	if r, ok := t.nft.(opsRunner); ok {
		return r.runOps(ctx, ops)
	}
	return t.nft.Run(ctx, transaction(t.nft, ops))
}

func newChain(c *chain) *knftables.Chain {
	kc := &knftables.Chain{Name: c.name}
	if c.hook != nil {
		kc.Type, kc.Hook, kc.Priority = knftables.PtrTo(c.hook.typ), knftables.PtrTo(c.hook.hook), knftables.PtrTo(c.hook.priority)
	}
	return kc
}

func setObject(s *set) knftables.Object {
	var comment *string
	if s.comment != "" {
		comment = knftables.PtrTo(s.comment)
	}
	var timeout *time.Duration
	if s.timeout > 0 {
		timeout = knftables.PtrTo(s.timeout)
	}
	if s.isMap {
		m := &knftables.Map{Name: s.name, Type: s.typ, Flags: s.flags, Timeout: timeout, Comment: comment}
		if s.typeOf != "" {
			m.Type, m.TypeOf = "", s.typeOf
		}
		return m
	}
	return &knftables.Set{Name: s.name, Type: s.typ, Flags: s.flags, Timeout: timeout, Comment: comment}
}

func elemObject(e elem) *knftables.Element {
	ke := &knftables.Element{Key: splitKey(e.key)}
	if e.isMap {
		ke.Map = e.set
		if e.value != "" {
			ke.Value = []string{e.value}
		}
	} else {
		ke.Set = e.set
	}
	if e.comment != "" {
		ke.Comment = knftables.PtrTo(e.comment)
	}
	return ke
}

// usesAny reports whether a rule of c names one of sets ("@name").
func usesAny(c *chain, sets map[string]bool) bool {
	if len(sets) == 0 {
		return false
	}
	for _, r := range c.rules {
		for _, f := range strings.Fields(r.text) {
			if name, ok := strings.CutPrefix(f, "@"); ok && sets[name] {
				return true
			}
		}
	}
	return false
}

// hookPart is the hook part of a chain signature.
func hookPart(sig string) string {
	for i := 0; i < len(sig); i++ {
		if sig[i] == 0 {
			return sig[:i]
		}
	}
	return sig
}

func sortIDs(ids []elemID) []elemID {
	slices.SortFunc(ids, func(a, b elemID) int {
		if c := strings.Compare(a.set, b.set); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return ids
}
