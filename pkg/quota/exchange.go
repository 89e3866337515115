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
	// Reserve writes the item's demand and sets its Assigned, which the
	// store grants in full if it is no more than before, else only as far
	// as Cap less every other live client's Assigned allows (never below
	// before), after adopting (Item.Adopt); the exchange returns the item's
	// demand as granted, with what it adopted.
	Reserve
)

// Item is one bucket's part of an exchange with the demand store.
type Item struct {
	Key    string // the bucket's store key
	Demand Demand // the client to write (with its rate) or delete
	Op     Op
	// Cap is, for Reserve, the most the bucket's clients may hold together.
	Cap float64
	// Adopt is, for Reserve, what the client takes over from values that
	// can be adopted: those of clients that left, and those not written for
	// Fresh (their replica no longer serves them), each lowered by what it
	// gives and marked Left (its Envoy taken to be this client's). A client
	// of an Envoy that moved from another stream adopts what it reports
	// having admitted there, which it holds already.
	Adopt float64
	// Fresh, if positive, is for Reserve the age past which a value can
	// be adopted; for Read, the age past which a value reads as Left (its
	// demand no longer counts; what it holds does). Ages are at the
	// exchange's ttl (a value's expiry less ttl is its write).
	Fresh time.Duration
}
