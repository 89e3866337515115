//go:build !race

package rlqs_test

const raceDetector = false
