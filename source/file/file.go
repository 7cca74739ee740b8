package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/cluster"
)

// Source publishes a file's objects to a cluster store and keeps them up to
// date as the file changes.
type Source struct {
	// Path is the file to read.
	Path string
	// Watch keeps re-reading the file when it changes; otherwise Run returns
	// after the first load.
	Watch bool

	// keys of what the last load stored, to delete what the next one drops.
	services, slices, nodes, cidrs map[string]bool
}

// debounce groups the bursts of events an editor or `kubectl > file` makes.
const debounce = 50 * time.Millisecond

// Run loads the file into store, marks the store synced, and (with Watch)
// reloads it on every change until ctx is done. A file that cannot be read
// at start is an error; later, an unreadable or vanished file keeps the
// last good state.
func (s *Source) Run(ctx context.Context, store *cluster.Store) error {
	logger := klog.FromContext(ctx).WithValues("file", s.Path)
	var watcher *fsnotify.Watcher
	if s.Watch {
		// Watch the directory: editors and `mv` replace the file, which a
		// watch on the file itself would lose.
		var err error
		if watcher, err = fsnotify.NewWatcher(); err != nil {
			return fmt.Errorf("watching %s: %w", s.Path, err)
		}
		defer watcher.Close()
		if err := watcher.Add(filepath.Dir(s.Path)); err != nil {
			return fmt.Errorf("watching %s: %w", s.Path, err)
		}
	}
	if err := s.Load(logger, store); err != nil {
		return err
	}
	store.MarkSynced()
	if !s.Watch {
		return nil
	}

	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			if filepath.Clean(ev.Name) == filepath.Clean(s.Path) {
				timer = time.After(debounce)
			}
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			logger.Error(err, "Watching the input file")
		case <-timer:
			timer = nil
			if err := s.Load(logger, store); err != nil {
				logger.Error(err, "Keeping the last good state")
			}
		}
	}
}

// Load reads the file once and applies it to the store as one batch.
func (s *Source) Load(logger klog.Logger, store *cluster.Store) error {
	b, err := os.ReadFile(s.Path)
	if err != nil {
		return fmt.Errorf("reading cluster state: %w", err)
	}
	objs, problems, err := Parse(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.Path, err)
	}
	for _, p := range problems {
		logger.Info("Skipped part of the input", "problem", p.String())
	}
	rev := s.Apply(store, objs)
	// The cluster revision that holds this content: the backend driver's
	// "Dataplane synced" line names the node view revision it applied, and
	// the feed's "Node view changed" and "Node view unchanged" lines map
	// cluster revisions to view revisions, so whoever wrote the file can
	// tell which sync applied it, whatever the order of the lines.
	logger.V(2).Info("Loaded", "services", len(objs.Services), "endpointSlices", len(objs.EndpointSlices),
		"nodes", len(objs.Nodes), "problems", len(problems), "digest", Digest(b), "clusterRevision", rev)
	return nil
}

// Digest names a version of the file's content in the "Loaded" log line:
// the first 12 hex digits of its SHA-256. Whoever wrote the file can tell
// when kpng has read that version, and at which cluster revision, where a
// time or a count of loads would race the watcher.
func Digest(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:6])
}

// Apply makes the store hold exactly objs (as far as this source is
// concerned), in one batch: what the previous Apply stored and objs lacks
// is deleted. It returns the store's revision that holds objs.
func (s *Source) Apply(store *cluster.Store, objs *Objects) uint64 {
	services, slices, nodes, cidrs := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	rev := store.Update(func(tx *cluster.Tx) {
		for _, o := range objs.Services {
			tx.SetService(o)
			services[cluster.Key(o.Namespace, o.Name)] = true
		}
		for _, o := range objs.EndpointSlices {
			tx.SetEndpointSlice(o)
			slices[cluster.Key(o.Namespace, o.Name)] = true
		}
		for _, o := range objs.Nodes {
			tx.SetNode(o)
			nodes[o.Name] = true
		}
		for _, o := range objs.ServiceCIDRs {
			tx.SetServiceCIDR(o)
			cidrs[o.Name] = true
		}
		for k := range s.services {
			if !services[k] {
				ns, name := splitKey(k)
				tx.DeleteService(ns, name)
			}
		}
		for k := range s.slices {
			if !slices[k] {
				ns, name := splitKey(k)
				tx.DeleteEndpointSlice(ns, name)
			}
		}
		for k := range s.nodes {
			if !nodes[k] {
				tx.DeleteNode(k)
			}
		}
		for k := range s.cidrs {
			if !cidrs[k] {
				tx.DeleteServiceCIDR(k)
			}
		}
	})
	s.services, s.slices, s.nodes, s.cidrs = services, slices, nodes, cidrs
	return rev
}

func splitKey(k string) (ns, name string) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return "", k
}
