//go:build !race

package filters_test

const raceEnabled = false
