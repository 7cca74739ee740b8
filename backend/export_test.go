package backend

// Merge exposes merge to the external tests.
var Merge = merge
