package quota

// Op is what an exchange with the demand store does in one bucket, as bits.
type Op uint8

// Ops.
const (
	Write         Op = 1 << iota // publish the item's demand
	Delete                       // remove the item's client
	Read                         // return every live demand of the bucket
	DeleteExpired                // Delete, if its value has expired (not written again)
)

// Item is one bucket's part of an exchange with the demand store.
type Item struct {
	Key    string // the bucket's store key
	Demand Demand // the client to write (with its rate) or delete
	Op     Op
}
