package backend

// Merge folds the changes b that happened after a into one Changes, as
// Run queues them, for the external tests.
func Merge(a, b Changes) Changes {
	var q queue
	q.add(a)
	q.add(b)
	return q.changes()
}
