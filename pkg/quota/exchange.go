package quota

// Op is what an exchange with the demand store does in one bucket: a set
// of the bits below.
type Op uint8

// Ops.
const (
	// Write publishes the item's demand.
	Write Op = 1 << iota
	// Delete removes the item's client from the bucket.
	Delete
	// Read returns every live demand of the bucket.
	Read
	// DeleteExpired removes the item's client from the bucket only if its
	// value has expired at the exchange's time: the demand stores send it
	// for the expired values a read met, so that a value written again
	// since is kept.
	DeleteExpired
)

// Item is one bucket's part of an exchange with the demand store.
type Item struct {
	// Key is the bucket's store key.
	Key string
	// Demand is the client to write (with its rate) or delete.
	Demand Demand
	Op     Op
}
