package quota

import "time"

// Op is what an exchange with the demand store does in one bucket, as bits.
type Op uint8

// Ops.
const (
	Write         Op = 1 << iota // publish the item's demand
	Delete                       // remove the item's client
	Read                         // return every live demand of the bucket
	DeleteExpired                // Delete, if its value has expired (not written again)
	// Reserve writes the item's demand and Assigned: granted in full if no
	// more than before, else up to Cap less what every other live client
	// holds; the answer is the item's demand as granted.
	Reserve
)

// Item is one bucket's part of an exchange with the demand store.
type Item struct {
	Key    string // the bucket's store key
	Demand Demand // the client to write (with its rate) or delete
	Op     Op
	Cap    float64 // Reserve: the most the bucket's clients may hold together
	// Adopt is, for Reserve, what the client takes over from clients that
	// left or whose value is Fresh old (their replica is gone), lowering
	// and marking them Left: a moved Envoy's old share.
	Adopt float64
	// Fresh is, for Reserve, the age of a value that can be adopted; for
	// Read, the age past which a value reads as Left. Ages are at the
	// exchange's ttl.
	Fresh time.Duration
}
