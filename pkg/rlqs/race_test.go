//go:build race

package rlqs_test

// raceDetector is true under -race, which slows the largest tests tenfold.
const raceDetector = true
