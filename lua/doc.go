// Package lua holds every script that runs in Redis and the typed Go calls over them.
//
// A campaign's keys share the hash tag {c:<campaign>}, so each script touches one slot and runs
// unchanged on Redis Cluster. Values always travel as ARGV, never spliced into script text.
// Scripts run by EVALSHA with go-redis's NOSCRIPT fallback; Load preloads them in one pipeline.
// Reservations go through a coalescer (coalesce.go): the purchases waiting at one moment travel
// as one reserve call per campaign, which answers each as if it had run alone.
//
// A reservation is a field of the campaign's res hash, "state|quantity|deadline_ms|user". Its
// state (the State constants) moves pending -> confirmed (confirm) or pending -> released
// (release), and confirmed -> refunded or confirmed -> expired (release again); release gives
// units back only on those transitions, so running it twice restores once.
package lua
